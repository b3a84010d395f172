#!/usr/bin/env python3
"""Reports import cycles between the modules of each crate of the workspace.

Usage: scripts/module-cycles.py [CRATE_DIR ...]   (default: every crate with a src/lib.rs)

A module is a file under src/ (src/a.rs and src/a/mod.rs are module `a`; src/a/b.rs is `a::b`).
Module M depends on module N when M's source (tests excluded: everything from a line
`#[cfg(test)]` followed by `mod tests` on) names `crate::N...` or `super::...` resolving to N,
either directly or through a `pub use` re-export in lib.rs or a parent module. Dependencies of a
module on its own ancestors (a child naming what its parent defines) are counted too: the parent
usually composes the child, so that is exactly the back edge the house style forbids. A parent's
`mod child;` declaration is not a dependency.

Exits 1 and prints each cycle (a strongly connected component of more than one module) when
there is any; prints "no module cycles" per crate otherwise.
"""

import os
import re
import sys

USE_TREE = re.compile(r"\buse\s+(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)(?:::\{([^;]*)\})?\s*;", re.S)
PATH_REF = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
PUB_USE = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([A-Za-z_][A-Za-z0-9_:]*)(?:::\{([^;]*)\})?\s*;", re.S)


def strip(source):
    """Drops comments, string literals and the test module, which create no dependencies."""
    source = re.sub(r"//[^\n]*", "", source)
    source = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    source = re.sub(r'r#*"(?:.|\n)*?"#*', '""', source)
    source = re.sub(r'"(?:\\.|[^"\\])*"', '""', source)
    test = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", source)
    if test:
        source = source[: test.start()]
    test = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*;", source)
    if test:
        source = source[: test.start()] + source[test.end():]
    return source


def modules_of(src):
    """Module path (tuple) -> file, for every .rs file under src (bin/ excluded)."""
    found = {}
    for root, dirs, files in os.walk(src):
        dirs[:] = [d for d in dirs if not (root == src and d == "bin")]
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel == ["lib"] or rel == ["main"]:
                module = ()
            elif rel[-1] == "mod":
                module = tuple(rel[:-1])
            else:
                module = tuple(rel)
            found[module] = path
    return found


def flatten(tree):
    """Paths named by a use tree's braces: `a::{b, c::{d}}` -> a::b, a::c::d."""
    paths, depth, current = [], 0, ""
    for ch in tree + ",":
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            item = current.strip()
            current = ""
            if not item:
                continue
            m = re.match(r"([A-Za-z_][A-Za-z0-9_:]*?)(?:::\{(.*)\})?\s*(?:as\s+\w+)?$", item, re.S)
            if not m:
                continue
            head, inner = m.group(1), m.group(2)
            if inner is not None:
                paths.extend(head + "::" + p for p in flatten(inner))
            else:
                paths.append(head)
        else:
            current += ch
    return paths


def reexports(modules):
    """Per module: name -> the module path it re-exports it from (`pub use x::Y` in that module)."""
    table = {}
    for module, path in modules.items():
        source = strip(open(path).read())
        names = {}
        for m in PUB_USE.finditer(source):
            head, tree = m.group(1), m.group(2)
            items = [head + "::" + p for p in flatten(tree)] if tree is not None else [head]
            for item in items:
                parts = [p for p in item.split("::") if p]
                if parts and parts[0] == "crate":
                    target = tuple(parts[1:-1])
                elif parts and parts[0] == "self":
                    target = module + tuple(parts[1:-1])
                else:
                    target = module + tuple(parts[:-1])
                names[parts[-1]] = target
        table[module] = names
    return table


def resolve(parts, modules, exports, depth=0):
    """The defining module of a crate-absolute path (a tuple of names)."""
    best = ()
    for i in range(len(parts), 0, -1):
        if tuple(parts[:i]) in modules:
            best = tuple(parts[:i])
            break
    rest = parts[len(best):]
    if rest and depth < 8:
        name = rest[0]
        target = exports.get(best, {}).get(name)
        if target is not None and target != best:
            return resolve(list(target) + list(rest), modules, exports, depth + 1)
    return best


def dependencies(module, path, modules, exports):
    source = strip(open(path).read())
    named = []
    for m in USE_TREE.finditer(source):
        root, head, tree = m.group(1), m.group(2), m.group(3)
        items = [head + "::" + p for p in flatten(tree)] if tree is not None else [head]
        for item in items:
            named.append((root, [p for p in item.split("::") if p]))
    for m in PATH_REF.finditer(source):
        named.append((m.group(1), [p for p in m.group(2).split("::") if p]))
    deps = set()
    for root, parts in named:
        if root == "crate":
            absolute = parts
        elif root == "super":
            base = list(module[:-1])
            while parts and parts[0] == "super":
                base = base[:-1]
                parts = parts[1:]
            absolute = base + parts
        else:  # self
            absolute = list(module) + parts
        target = resolve(absolute, modules, exports)
        # A module naming its own descendants composes them: not a back edge.
        if target[: len(module)] == module:
            continue
        deps.add(target)
    return deps


def cycles(graph):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def name(module):
    return "::".join(module) or "(lib)"


def check(crate):
    src = os.path.join(crate, "src")
    if not os.path.exists(os.path.join(src, "lib.rs")):
        return 0
    modules = modules_of(src)
    exports = reexports(modules)
    graph = {m: dependencies(m, p, modules, exports) for m, p in modules.items()}
    # The crate root composes everything: its edges are declarations and re-exports.
    graph[()] = set()
    found = cycles(graph)
    crate_name = os.path.basename(os.path.abspath(crate))
    if not found:
        print(f"{crate_name}: no module cycles ({len(modules)} modules)")
        return 0
    for component in found:
        members = set(component)
        edges = [
            f"{name(a)} -> {name(b)}"
            for a in component
            for b in sorted(graph[a])
            if b in members
        ]
        print(f"{crate_name}: cycle among {', '.join(name(m) for m in component)}: {'; '.join(edges)}")
    return 1


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    crates = sys.argv[1:] or sorted(
        os.path.join(root, d)
        for d in os.listdir(root)
        if os.path.exists(os.path.join(root, d, "src", "lib.rs"))
    )
    status = 0
    for crate in crates:
        status |= check(crate)
    sys.exit(status)


if __name__ == "__main__":
    main()
