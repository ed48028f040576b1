"""A worker process for the failover tests (test_failover.py): its handlers
leave traces in --dir so the test can tell what ran where, and how often.

    python worker_proc.py --url ws://.../workers --token T --name A --dir DIR
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from subtask_worker import Context, Worker


def append(path: Path, line: str) -> str:
    with open(path, "a") as f:
        f.write(line + "\n")
    return line


async def wait_for(path: Path) -> None:
    while not path.exists():
        await asyncio.sleep(0.02)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--dir", required=True, type=Path)
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format=f"{a.name} %(asctime)s %(levelname)s %(message)s")
    d: Path = a.dir
    worker = Worker(a.url, token=a.token, name=a.name, capacity=4)

    @worker.tool("replay_parent")
    async def replay_parent(ctx: Context, args: dict[str, Any]) -> str:
        append(d / "attempts.log", f"{a.name} attempt={ctx.attempt} replay={ctx.replay}")
        await ctx.step("a", append, d / "steps.log", "a")
        child = await ctx.spawn("replay_child", {"n": 1})
        append(d / "parent.log", f"{a.name} spawned {child.id}")
        await wait_for(d / "release")
        outcome = await child.outcome()
        return f"parent done on {a.name} after the child said {outcome.text!r}"

    @worker.tool("replay_child")
    async def replay_child(ctx: Context, args: dict[str, Any]) -> str:
        append(d / "child.log", f"child ran on {a.name}")
        return "child ok"

    @worker.tool("stall")
    async def stall(ctx: Context, args: dict[str, Any]) -> str:
        append(d / "stall.log", f"{a.name} attempt={ctx.attempt} replay={ctx.replay}")
        if not ctx.replay:
            (d / f"stalling.{a.name}").touch()
            # Blocks the event loop: the test stops this process meanwhile
            # (SIGSTOP) past the lease, then continues it (SIGCONT).
            time.sleep(1.0)
            await ctx.status(f"{a.name} woke up")  # refused: stale_attempt
            return f"stale result from {a.name}"
        await wait_for(d / "release")
        return f"completed on {a.name} attempt {ctx.attempt}"

    asyncio.run(worker.run())


if __name__ == "__main__":
    main()
