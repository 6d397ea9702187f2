#!/usr/bin/env python3
"""layers.py - the dependency graph between the source files of daemon/,
engine/, cuda/ and proto/, derived from the sources and the built objects,
and its rules:

  * no circle of calls: file A calls into B (A's object references a symbol
    that B's object defines, `nm`) and B, directly or round a loop, calls
    back into A;
  * no circle of includes (#include "..." lines, resolved as the compiler
    does: the including file's folder, then the -I folders);
  * layers: nothing in engine/ includes or calls into cuda/ or daemon/, and
    nothing in proto/ into daemon/ or cuda/.

Usage: layers.py [--build DIR] [--graph]   (--graph prints every edge)
Exits 0 when every rule holds, 1 with one line per violation otherwise, 77
when the objects are not built (the checker needs `make` first).
"""
import argparse
import collections
import os
import re
import subprocess
import sys

TREES = ("daemon", "engine", "cuda", "proto")
SRC_EXT = (".c", ".cc", ".cu")
# Which trees a tree may not reach (by include or by call).
FORBIDDEN = {"engine": ("cuda", "daemon"), "proto": ("cuda", "daemon")}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def tree_of(path):
    return path.split("/", 1)[0]


def list_files(root):
    """Every source and header under the trees, as paths relative to root."""
    out = []
    for t in TREES:
        for dirpath, _, names in os.walk(os.path.join(root, t)):
            for n in names:
                if n.endswith(SRC_EXT + (".h", ".cuh")):
                    out.append(os.path.relpath(os.path.join(dirpath, n), root))
    return sorted(out)


def include_dirs(files):
    """The -I folders: every folder of the trees that holds a header (the
    Makefile's flags name a subset; the checker resolves a name as long as
    one folder holds it, so that a wrong -I shows as a build error, not here)."""
    return sorted({os.path.dirname(f) for f in files if f.endswith((".h", ".cuh"))})


def include_edges(root, files):
    """(including file, included file) for every #include "..." that names a
    file of the trees; the including file's own folder first."""
    dirs = include_dirs(files)
    fileset = set(files)
    edges = set()
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for name in INCLUDE_RE.findall(text):
            cands = [os.path.normpath(os.path.join(os.path.dirname(f), name))]
            cands += [os.path.normpath(os.path.join(d, name)) for d in dirs]
            hit = next((c for c in cands if c in fileset), None)
            if hit and hit != f:
                edges.add((f, hit))
    return edges


def nm_symbols(obj):
    """(defined, undefined) global symbol sets of one object."""
    r = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True)
    defined, undefined = set(), set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        sym, kind = parts[0], parts[1]
        if kind in ("U", "w", "v"):
            undefined.add(sym)
        elif kind in ("T", "D", "B", "R", "V", "W", "G", "S", "C", "i", "u"):
            defined.add(sym)
    return defined, undefined


def call_edges(root, build, files):
    """(caller file, callee file) from the objects under BUILD/obj. Returns
    (edges, number of sources with an object, sources without one)."""
    defs = collections.defaultdict(set)
    refs = {}
    missing = []
    for f in files:
        if not f.endswith(SRC_EXT):
            continue
        obj = os.path.join(root, build, "obj", os.path.splitext(f)[0] + ".o")
        if not os.path.exists(obj):
            missing.append(f)
            continue
        d, u = nm_symbols(obj)
        for s in d:
            defs[s].add(f)
        refs[f] = u
    edges = set()
    for f, u in refs.items():
        for s in u:
            owners = defs.get(s, ())
            # A symbol defined by several files (each program's main, a
            # test double) says nothing about which one is called.
            if len(owners) == 1:
                (g,) = owners
                if g != f:
                    edges.add((f, g))
    return edges, len(refs), missing


def cycles(edges):
    """The strongly connected components of more than one node (Tarjan)."""
    graph = collections.defaultdict(list)
    for a, b in edges:
        graph[a].append(b)
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        # iterative Tarjan: (node, iterator over its successors)
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for v in sorted(list(graph)):
        if v not in index:
            visit(v)
    return out


def describe_cycle(comp, edges):
    """The edges inside one circle, "a -> b" each."""
    inside = set(comp)
    return ", ".join(f"{a} -> {b}" for a, b in sorted(edges) if a in inside and b in inside)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--graph", action="store_true")
    args = ap.parse_args()
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    files = list_files(root)
    inc = include_edges(root, files)
    calls, nobj, missing = call_edges(root, args.build, files)
    if nobj == 0:
        print(f"no objects under {args.build}/obj: run make first")
        return 77
    if args.graph:
        for a, b in sorted(calls):
            print(f"call    {a} -> {b}")
        for a, b in sorted(inc):
            print(f"include {a} -> {b}")
    bad = []
    for comp in cycles(calls):
        bad.append(f"call circle: {describe_cycle(comp, calls)}")
    for comp in cycles(inc):
        bad.append(f"include circle: {describe_cycle(comp, inc)}")
    for kind, edges in (("calls into", calls), ("includes", inc)):
        for a, b in sorted(edges):
            if tree_of(b) in FORBIDDEN.get(tree_of(a), ()):
                bad.append(f"layer: {a} {kind} {b} ({tree_of(a)}/ may not reach {tree_of(b)}/)")
    for line in bad:
        print(line)
    print(f"layers: {len(files)} files, {nobj} objects ({len(missing)} sources not built here), "
          f"{len(calls)} call edges, {len(inc)} include edges, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
