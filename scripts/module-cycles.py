#!/usr/bin/env python3
"""Import cycles between the modules of one folder of the crate.

Usage: scripts/module-cycles.py [-v] [DIR ...]   (default: src/server src/store)

Each file or subfolder directly under DIR is one module. A module imports
another when its code (comments and `#[cfg(test)] mod tests` left out)
names it through `super::NAME`, `crate::<dir>::NAME` or a `super::{...}` /
`crate::<dir>::{...}` group. The strongly connected components with more
than one module are printed; the exit status is 1 when there is one.
"""
import os
import re
import sys


def graph(root):
    crate_path = "crate::" + "::".join(os.path.relpath(root, "src").split(os.sep))
    mods = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(dirpath, f)
                name = os.path.relpath(p, root)[:-3].split(os.sep)[0]
                mods.setdefault("(mod)" if name == "mod" else name, []).append(p)
    names = set(mods)
    edges = {m: set() for m in mods}
    prefix = r"(?:" + re.escape(crate_path) + r"::|super::(?:super::)?)"
    for m, paths in mods.items():
        for p in paths:
            s = open(p).read()
            s = re.split(r"#\[cfg\(test\)\]\s*mod tests", s)[0]
            s = re.sub(r"//[^\n]*", "", s)
            refs = re.findall(prefix + r"([a-z_]+)", s)
            for group in re.findall(prefix + r"\{([^}]*)\}", s):
                refs += re.findall(r"\b([a-z_]+)\b", group)
            edges[m].update(r for r in refs if r in names and r != m)
    return edges


def cycles(edges):
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if a != "-v"]
    found = False
    for root in args or ["src/server", "src/store"]:
        edges = graph(root)
        if "-v" in sys.argv:
            for m in sorted(edges):
                print(f"{root}: {m} -> {', '.join(sorted(edges[m])) or '-'}")
        for comp in cycles(edges):
            found = True
            print(f"{root}: import cycle: {' -> '.join(comp)}")
    if not found:
        print("no import cycle in " + ", ".join(args or ["src/server", "src/store"]))
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
