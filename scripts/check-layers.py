#!/usr/bin/env python3
"""Checks that the `hipfs` library crate (src/) has no module cycle.

Builds the module graph from `crate::`, `super::` and `self::` paths, paths
through a module's own child modules, and `use` lines, in non-test code (the
text of each file before its first `#[cfg(test)]`, comments and string
literals removed). A path names the deepest module it reaches; an item a
module re-exports (`pub use a::b::Item`) counts as the module it comes from.

A module's use of its own ancestors (`super::Request` in `io::staged`) is not
an edge: a submodule implementing part of its parent is the parent's
business. Every other reference, a parent's use of its own children
included, is. `src/cli/` and `src/main.rs` (the binary's face) are left out.

Prints the graph and every strongly connected component of more than one
module, and exits 1 if there is any. Usage: scripts/check-layers.py [SRC_DIR]
"""

import os
import re
import sys

ROOT = "crate"


def module_of(rel):
    """`io/staged.rs` -> `io::staged`; `lib.rs` -> `crate`."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    if parts == ["lib"]:
        return ROOT
    return "::".join(parts)


def strip(text):
    """Removes comments and the contents of string and char literals."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            out.append('""')
            i = n if end < 0 else end + 1 + len(m.group(1))
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def non_test(text):
    cut = text.find("#[cfg(test)]")
    return text if cut < 0 else text[:cut]


def expand_use(tree):
    """`a::{b, c::{d, self}, e as f}` -> [(['a','b'], 'b'), ...] (path, bound name)."""
    tree = re.sub(r"\s+", "", tree)

    def split_top(s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        return parts

    def walk(prefix, s):
        if not s:
            return []
        brace = s.find("{")
        if brace >= 0 and s.endswith("}"):
            head = [p for p in s[:brace].split("::") if p]
            out = []
            for part in split_top(s[brace + 1:-1]):
                out += walk(prefix + head, part)
            return out
        alias = None
        if "as" in s and re.search(r"[^:]as[A-Za-z_]", s):
            s, alias = re.split(r"(?<=[A-Za-z0-9_])as(?=[A-Za-z_])", s, maxsplit=1)
        segs = [p for p in s.split("::") if p]
        if segs == ["*"]:
            return [(prefix, None)]
        if segs and segs[-1] == "*":
            return [(prefix + segs[:-1], None)]
        if segs == ["self"]:
            return [(prefix, alias or (prefix[-1] if prefix else None))]
        path = prefix + segs
        return [(path, alias or (path[-1] if path else None))]

    return walk([], tree)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    src = os.path.normpath(src)
    texts = {}
    for dirpath, dirnames, filenames in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src)
        if rel_dir == "cli" or rel_dir.startswith("cli" + os.sep):
            dirnames[:] = []
            continue
        for f in filenames:
            if not f.endswith(".rs"):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, f))
            if rel == "main.rs":
                continue
            with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                texts[module_of(rel)] = strip(fh.read())

    # Modules declared under #[cfg(test)] are test code.
    test_mods = set()
    for m, t in texts.items():
        for name in re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", t):
            test_mods.add(name if m == ROOT else m + "::" + name)
    modules = {m for m in texts if not any(m == t or m.startswith(t + "::") for t in test_mods)}

    def children(m):
        pre = "" if m == ROOT else m + "::"
        return {x[len(pre):] for x in modules if x.startswith(pre) and "::" not in x[len(pre):] and x != ROOT}

    def absolute(m, segs):
        """Makes a path absolute (a list from the crate root), or None if external."""
        here = [] if m == ROOT else m.split("::")
        if not segs:
            return None
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] in ("self", "super"):
            cur = list(here)
            i = 0
            while i < len(segs) and segs[i] in ("self", "super"):
                if segs[i] == "super":
                    if not cur:
                        return None
                    cur.pop()
                i += 1
            return cur + segs[i:]
        if segs[0] in children(m):
            return here + segs
        return None

    body = {m: non_test(texts[m]) for m in modules}
    uses = {}
    reexports = {m: {} for m in modules}
    use_re = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
    for m in modules:
        uses[m] = []
        for vis, tree in use_re.findall(body[m]):
            for segs, name in expand_use(tree):
                path = absolute(m, segs)
                if path is None:
                    continue
                uses[m].append(path)
                if vis and name:
                    reexports[m][name] = path

    def resolve(path, depth=0):
        """The module a crate-absolute path names."""
        mod, i = ROOT, 0
        while i < len(path):
            nxt = path[i] if mod == ROOT else mod + "::" + path[i]
            if nxt in modules:
                mod, i = nxt, i + 1
            else:
                break
        if i < len(path) and depth < 8 and path[i] in reexports.get(mod, {}):
            return resolve(reexports[mod][path[i]] + path[i + 1:], depth + 1)
        return mod

    path_re = re.compile(r"(?<![\w:])((?:crate|super|self|[a-z_][a-z0-9_]*)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")
    edges = {m: set() for m in modules}
    for m in modules:
        refs = list(uses[m])
        code = use_re.sub(" ", body[m])
        for p in path_re.findall(code):
            path = absolute(m, p.split("::"))
            if path is not None:
                refs.append(path)
        for path in refs:
            target = resolve(path)
            ancestor = target == ROOT or m.startswith(target + "::")
            if target != m and not ancestor:
                edges[m].add(target)

    # Tarjan's strongly connected components (iterative).
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]
    for start in sorted(modules):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                sccs.append(sorted(comp))

    print("module graph (module -> modules it uses):")
    for m in sorted(modules):
        print(f"  {m} -> {', '.join(sorted(edges[m])) or '-'}")
    cycles = [c for c in sccs if len(c) > 1]
    if cycles:
        print(f"\n{len(cycles)} module cycle(s):")
        for c in cycles:
            print("  " + ", ".join(c))
        return 1
    print("\nno module cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
