#!/usr/bin/env python3
"""Writes the fuzz seeds (docs/fuzzing.md, "Seeds") into OUT/<target>/:

    python3 fuzz/seeds/seed.py OUT

from the golden fixtures (tests/fixtures/*.json), the traffic captured from
a real `subtask serve` (fuzz/seeds/traffic.jsonl.gz, recorded with
capture.py while the CLI and curl drove fanout, deep_research, steer,
pause, resume, cancel, input, subscriptions, the legacy wire and refused
requests), the rows of that server's SQLite file after a `kill -9` in the
middle of running trees (fuzz/seeds/rows.tsv), and a few hand-written
sequences. The formats are described in src/fuzzing/{server,store,client}.rs.
Seeds are inputs to `cargo fuzz`, which grows and minimizes them into
fuzz/corpus/<target>/.
"""

import gzip
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# The fixtures' ids (tests/fixtures/README.md): the spec's task, its two
# constructed children, and the failed-task example's id.
FIXTURE_IDS = [
    "786512e2-9e0d-44bd-8f29-789f320fe840",
    "1c9a4f3e-5b2d-4e8f-9a6c-0d7e2b1f4a93",
    "b7e2d8c1-3a4f-4b6e-8d9c-5f1a2e3b4c5d",
    "786512e2-9e0d-44bd-8f29-789f820fe840",
]
CLIENT_MAX_BODY = 60 * 1024


def write(out, target, name, text):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "w") as f:
        f.write(text)


def fixtures():
    for name in sorted(os.listdir(FIXTURES)):
        if name.endswith(".json"):
            with open(os.path.join(FIXTURES, name)) as f:
                yield name[:-5], json.load(f)


def compact(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


class Ids:
    """Maps real task ids to the placeholders of one seed, in order of appearance."""

    def __init__(self, fmt, first=0):
        self.fmt, self.map, self.next = fmt, {}, first

    def learn(self, text):
        for u in UUID.findall(text):
            if u not in self.map:
                self.map[u] = self.fmt(self.next)
                self.next += 1

    def sub(self, text):
        return UUID.sub(lambda m: self.map.get(m.group(0), m.group(0)), text)


# ---- server_entry ----------------------------------------------------------

META = "$META"
CREATE = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fanout","arguments":{"width":2,"depth":1,"steps":2,"stepMs":100},$META}}'


def server_seeds(out, traffic):
    # Each request fixture after a call that creates live tasks ($T0..).
    for name, v in fixtures():
        if "method" not in v:
            continue
        ids = Ids(lambda n: "$T%d" % min(n, 9))
        for u in FIXTURE_IDS:
            ids.learn(u)
        body = ids.sub(compact(v))
        write(out, "server_entry", "fixture-" + name, CREATE + "\n===\n" + body + "\n")
        params = v.get("params") if isinstance(v.get("params"), dict) else None
        if params is not None and "_meta" not in params and "id" in v:
            # The same request on the 2026-07-28 wire.
            inner = compact(params)[1:-1]
            sep = "," if inner else ""
            body = ids.sub('{"jsonrpc":"2.0","id":%s,"method":%s,"params":{%s%s$META}}'
                           % (compact(v["id"]), compact(v["method"]), inner, sep))
            write(out, "server_entry", "fixture-modern-" + name, CREATE + "\n===\n" + body + "\n")

    # Captured traffic, as raw requests: one seed per tree from its tools/call on.
    def raw(req, ids):
        lines = ["%s %s" % (req["method"], req["path"])]
        for k, v in req["headers"]:
            if k.lower() in ("content-length", "accept-encoding", "user-agent", "accept"):
                continue
            lines.append("%s: %s" % (k, ids.sub(v)))
        return "\n".join(lines) + "\n\n" + ids.sub(req["body"])

    n = 0
    for i, rec in enumerate(traffic):
        req = rec["request"]
        if '"tools/call"' not in req["body"]:
            continue
        ids = Ids(lambda k: "$T%d" % min(k, 9))
        ids.learn(rec["response"]["body"][:2000])
        steps = [raw(req, ids)]
        for later in traffic[i + 1:]:
            body = later["request"]["body"]
            if any(u in ids.map for u in UUID.findall(body)):
                steps.append(raw(later["request"], ids))
                ids.learn(later["response"]["body"][:4000])
            if len(steps) >= 12:
                break
        write(out, "server_entry", "traffic-%02d" % n, "\n===\n".join(steps))
        n += 1
    # Every refused or odd request on its own.
    for j, rec in enumerate(traffic):
        if rec["response"]["status"] != 200:
            ids = Ids(lambda k: "$T%d" % min(k, 9))
            write(out, "server_entry", "traffic-refused-%02d" % j, raw(rec["request"], ids))

    hand = {
        "probe-and-get": [
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"probe","arguments":{},$META}}',
            "@sleep 200",
            '{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"$T0",$META}}',
            '{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"$T1",$META}}',
        ],
        "ask-update": [
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask","arguments":{},$META}}',
            "@sleep 10",
            '{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"$T0",$META}}',
            '{"jsonrpc":"2.0","id":3,"method":"tasks/update","params":{"taskId":"$T0","inputResponses":{"$KEY":{"action":"accept","content":{"ok":true}}},$META}}',
            "@sleep 10",
            '{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"$T0",$META}}',
        ],
        "mrtr-rounds": [
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"mrtr","arguments":{},$META}}',
            '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"mrtr","arguments":{},"inputResponses":{"$KEY":{"action":"accept","content":{"ok":true}}},"requestState":$STATE,$META}}',
            '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"mrtr","arguments":{},"inputResponses":{"confirm":{"action":"decline"}},"requestState":"tampered",$META}}',
        ],
        "pause-resume-cancel": [
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fanout","arguments":{"width":2,"depth":2,"steps":20,"stepMs":100},$META}}',
            "@sleep 150",
            '{"jsonrpc":"2.0","id":2,"method":"tasks/pause","params":{"taskId":"$T0",$META}}',
            "@sleep 300",
            '{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"$T0",$META}}',
            '{"jsonrpc":"2.0","id":4,"method":"tasks/steer","params":{"taskId":"$T1","message":"focus on cancellation",$META}}',
            '{"jsonrpc":"2.0","id":5,"method":"tasks/resume","params":{"taskId":"$T0",$META}}',
            '{"jsonrpc":"2.0","id":6,"method":"tasks/cancel","params":{"taskId":"$T1",$META}}',
            '{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"taskIds":["$T0"]},$META}}',
        ],
        "deep-research-steer": [
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"deep_research","arguments":{"question":"How do MCP tasks handle failures?","pace":2},$META}}',
            "@sleep 300",
            '{"jsonrpc":"2.0","id":2,"method":"tasks/steer","params":{"taskId":"$T0","message":"focus on cancellation",$META}}',
            '{"jsonrpc":"2.0","id":3,"method":"subscriptions/listen","params":{"notifications":{"taskIds":["$T0"]},$META}}',
        ],
        "ttl-expiry": [
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fanout","arguments":{"width":1,"depth":1,"steps":100,"stepMs":1000,"ttlMs":500},$META}}',
            "@sleep 2000",
            '{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"$T0",$META}}',
            "@sleep 120000",
            '{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"$T0",$META}}',
        ],
        "legacy-flow": [
            '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"c","version":"1"}}}',
            '{"jsonrpc":"2.0","method":"notifications/initialized"}',
            '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fanout","arguments":{"width":1,"depth":1,"steps":1,"stepMs":10},"task":{"ttl":60000}}}',
            '{"jsonrpc":"2.0","id":3,"method":"tasks/list","params":{}}',
            '{"jsonrpc":"2.0","id":4,"method":"tasks/result","params":{"taskId":"$T0"}}',
            '{"jsonrpc":"2.0","id":5,"method":"tasks/get","params":{"taskId":"$T0"}}',
            '{"jsonrpc":"2.0","id":6,"method":"tasks/cancel","params":{"taskId":"$T0"}}',
        ],
        "notification-and-response": [
            '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}',
            '{"jsonrpc":"2.0","id":9,"result":{"action":"accept"}}',
            '{"jsonrpc":"2.0","id":9,"error":{"code":-32600,"message":"no"}}',
            '[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]',
        ],
    }
    for name, steps in hand.items():
        write(out, "server_entry", "hand-" + name, "\n===\n".join(steps) + "\n")


# ---- stored_state ----------------------------------------------------------


def store_seeds(out, rows):
    by_root = {}
    for r in rows:
        by_root.setdefault(r[1], []).append(r)

    def render(rs):
        ids = Ids(lambda n: "#%d" % (n + 1))
        lines = []
        for r in rs:
            cells = []
            for i, c in enumerate(r):
                if i < 3 and c.startswith("x") and len(c) == 33:
                    u = c[1:]
                    u = "%s-%s-%s-%s-%s" % (u[:8], u[8:12], u[12:16], u[16:20], u[20:])
                    ids.learn(u)
                    cells.append(ids.map[u])
                else:
                    cells.append(ids.sub(c))
            lines.append("\t".join(cells))
        return "\n".join(lines) + "\n"

    for k, (root, rs) in enumerate(by_root.items()):
        write(out, "stored_state", "captured-tree-%d" % k, render(rs))
    write(out, "stored_state", "captured-all", render(rows))
    small = by_root[next(iter(by_root))][:1]
    base = render(small).rstrip("\n").split("\t")
    variants = {
        "text-id": ["#1x"] + base[1:],
        "short-blob": ["x0102"] + base[1:],
        "negative-position": base[:3] + ["i-1"] + base[4:],
        "real-version": base[:4] + ["f1.5"] + base[5:],
        "text-resumable": base[:7] + ["yes"] + base[8:],
        "bad-launch": base[:8] + ["{"],
        "newer-format": base[:5] + [base[5].replace('"v":1', '"v":2', 1)] + base[6:],
    }
    for name, cells in variants.items():
        write(out, "stored_state", "variant-" + name, "\t".join(cells) + "\n")


# ---- client_answers --------------------------------------------------------


def client_seeds(out, traffic):
    def answer(rec, ids, method):
        body = rec["response"]["body"]
        ids.learn(body[:4000])
        kind = "sse" if any(k.lower() == "content-type" and "event-stream" in v
                            for k, v in rec["response"]["headers"]) else "json"
        if kind == "sse":
            events = body.split("\n\n")
            keep = []
            size = 0
            for e in events:
                if size + len(e) > CLIENT_MAX_BODY // 2:
                    break
                keep.append(e)
                size += len(e) + 2
            body = "\n\n".join(keep) + "\n\n"
        body = re.sub(r'"id":\d+', '"id":$ID', body, count=1) if kind == "json" else \
            re.sub(r'("jsonrpc":"2.0","id":)\d+', r"\1$ID", body)
        short = method.split("/")[-1]
        return "=== %s %d %s\n%s" % (short, rec["response"]["status"], kind, ids.sub(body))

    n = 0
    for i, rec in enumerate(traffic):
        req = rec["request"]
        if '"tools/call"' not in req["body"] or "subtask-client" not in req["body"]:
            continue
        ids = Ids(lambda k: "#%d" % (k + 1))
        answers = [answer(rec, ids, "tools/call")]
        for later in traffic[i + 1:]:
            b = later["request"]["body"]
            if "subtask-client" not in b:
                continue
            if '"tools/call"' in b:
                break
            m = json.loads(b).get("method", "")
            if any(u in ids.map for u in UUID.findall(b)):
                answers.append(answer(later, ids, m))
            if len(answers) >= 40:
                break
        text = "\n".join(answers)
        write(out, "client_answers", "traffic-call-%02d" % n, "call input\n" + text + "\n")
        write(out, "client_answers", "traffic-watch-%02d" % n,
              "watch\n" + "\n".join(answers[1:]) + "\n")
        n += 1

    # The fixtures as answers to tasks/get (and notifications on a stream).
    ids = Ids(lambda k: "#%d" % (k + 1))
    for u in FIXTURE_IDS:
        ids.learn(u)
    for name, v in fixtures():
        if "result" in v:
            body = ids.sub(compact(dict(v, id="$ID"))).replace('"$ID"', "$ID")
            write(out, "client_answers", "fixture-get-" + name, "get\n=== get 200 json\n" + body + "\n")
            write(out, "client_answers", "fixture-watch-" + name,
                  "watch nosub\n=== get 200 json\n" + body + "\n")
        elif v.get("method", "").startswith("notifications/"):
            ack = ('{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":'
                   '{"notifications":{"taskIds":["#1"]}}}')
            sse = "event: message\ndata: %s\n\nevent: message\ndata: %s\n\n" % (ack, ids.sub(compact(v)))
            write(out, "client_answers", "fixture-stream-" + name,
                  "watch\n=== listen 200 sse chunk=7\n" + sse + "\n=== get 200 json\n"
                  + ids.sub('{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"complete","taskId":"#1",'
                            '"status":"working","createdAt":"2025-11-25T10:30:00Z",'
                            '"lastUpdatedAt":"2025-11-25T10:30:00Z","ttlMs":null,"pollIntervalMs":100}}')
                  + "\n")
    hand = {
        "cycle": ("tree",
                  ['=== get 200 json\n{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"complete","taskId":"#1","status":"working","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":null,"pollIntervalMs":0,"childTaskIds":["#2"]}}',
                   '=== get 200 json\n{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"complete","taskId":"#2","parentTaskId":"#1","status":"working","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":null,"pollIntervalMs":0,"childTaskIds":["#1"]}}']),
        "dangling": ("watch nosub",
                     ['=== get 200 json\n{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"complete","taskId":"#1","status":"working","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":null,"pollIntervalMs":0,"childTaskIds":["#2"]}}',
                      '=== get 400 json\n{"jsonrpc":"2.0","id":$ID,"error":{"code":-32602,"message":"Failed to retrieve task: Task not found"}}',
                      '=== get 200 json\n{"jsonrpc":"2.0","id":$ID,"error":{"code":-32602,"message":"Failed to retrieve task: Task not found"}}']),
        "wrong-task": ("watch",
                       ['=== get 200 json\n{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"complete","taskId":"#9","status":"completed","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":null,"pollIntervalMs":0,"result":{"content":[]}}}']),
        "mrtr": ("wait input",
                 ['=== call 200 json\n{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"input_required","inputRequests":{"k":{"method":"elicitation/create","params":{"message":"?","requestedSchema":{"type":"object","properties":{}}}}},"requestState":"s"}}',
                  '=== call 200 json\n{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"input_required","inputRequests":{"k2":{"method":"elicitation/create","params":{}}}}}',
                  '=== call 200 json\n{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"complete","content":[{"type":"text","text":"ok"}]}}']),
        "input-in-task": ("call input",
                          ['=== call 200 json\n{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"task","taskId":"#1","status":"working","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":null,"pollIntervalMs":10}}',
                           '=== listen 200 broken\n',
                           '=== get 200 json\n{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"complete","taskId":"#1","status":"input_required","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:01Z","ttlMs":null,"pollIntervalMs":10,"inputRequests":{"confirm":{"method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}}}}}',
                           '=== update 200 json\n{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"complete"}}',
                           '=== get 200 json\n{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"complete","taskId":"#1","status":"completed","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:02Z","ttlMs":null,"pollIntervalMs":10,"result":{"content":[{"type":"text","text":"done"}],"isError":false}}}']),
        "silence-and-endless": ("call",
                                ['=== call 200 json\n{"jsonrpc":"2.0","id":$ID,"result":{"resultType":"task","taskId":"#1","status":"working","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":null,"pollIntervalMs":0}}',
                                 '=== listen 200 sse open\nevent: message\ndata: {"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"notifications":{"taskIds":["#1"]}}}\n\n',
                                 '=== get 200 silent\n',
                                 '=== get 200 json open\n{"jsonrpc":"2.0",',
                                 '=== get 502 text\n<html>bad gateway</html>']),
    }
    for name, (op, answers) in hand.items():
        write(out, "client_answers", "hand-" + name, op + "\n" + "\n".join(answers) + "\n")


def main():
    out = sys.argv[1]
    with gzip.open(os.path.join(HERE, "traffic.jsonl.gz"), "rt") as f:
        traffic = [json.loads(line) for line in f]
    with open(os.path.join(HERE, "rows.tsv")) as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    server_seeds(out, traffic)
    store_seeds(out, rows)
    client_seeds(out, traffic)
    for t in ("server_entry", "stored_state", "client_answers"):
        print(t, len(os.listdir(os.path.join(out, t))))


if __name__ == "__main__":
    main()
