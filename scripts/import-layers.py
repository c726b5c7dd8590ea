#!/usr/bin/env python3
"""Checks that every crate's modules import each other in one direction.

For each crate root of each workspace crate (src/lib.rs, src/main.rs,
src/bin/*, tests/*, benches/*, examples/*), it walks the module tree from
the `mod` declarations (and their `#[path]`s), reads every path a file
names into its own crate (`use crate::...`, `use super::...`,
`use self::...`, a `use` of a child module, and the same paths written
inline, such as `crate::sys::Sys`), and builds a graph of FILES: an edge
from a file to the file that holds the module a path reaches (the longest
prefix of the path that is a module; a name that module only re-exports
is followed to the file that defines it). Comments, string literals and
items under `#[cfg(test)]` are left out: tests may reach anywhere.

It fails, naming the files and lines, on:
- an import circle among the files of one crate root (but for the known
  ones in KNOWN_CIRCLES, which may shrink and not grow);
- a ground file importing anything but the ground and leaves, and a file
  below the top importing the top (LAYERS below: for liken-init, sys/
  speaks to the kernel; the step table and the supervisor loop sit on
  top).

Why files and not modules: a circle between two files is what a reader
has to hold in their head at once, and what stops one file moving to a
lower layer. Run from `make lint`; `--self-test` runs its own fixtures.

Usage: import-layers.py [--self-test] [WORKSPACE_DIR]
"""

import os
import re
import sys

# Layers, per crate, as paths relative to the crate's src/ (a path
# ending in / is a directory). A "ground" file may import another ground
# file, or a leaf: a file that itself imports nothing of its crate (a
# plain utility such as console.rs). A "top" file may be imported by top
# files alone. liken-init: sys/ speaks to the kernel; the step table,
# the supervisor loop and the crate root sit on top (docs/init.md,
# Layers).
LAYERS = {
    "liken-init": {
        "ground": ["sys/"],
        "top": ["lib.rs", "main.rs", "steps.rs", "serve.rs"],
    },
}

# Circles this check found when it came (issue 27) and that are not
# mended yet, by crate root: the files each holds. A known circle may
# shrink; a file joining it, or any other circle, fails the check.
# liken-cli: the crate root's Error wraps every command's error and every
# command returns it (mend: each command's entry point in a child file
# of its module, Io in a file of its own).
KNOWN_CIRCLES = {
    "liken-cli/src/lib.rs": [
        "liken-cli/src/args.rs", "liken-cli/src/cluster/mod.rs",
        "liken-cli/src/cluster/passthrough.rs", "liken-cli/src/cluster/reboot.rs",
        "liken-cli/src/completion.rs", "liken-cli/src/identity/adopt.rs",
        "liken-cli/src/identity/kubeconfig.rs", "liken-cli/src/identity/mint.rs",
        "liken-cli/src/identity/mod.rs", "liken-cli/src/layer/mod.rs", "liken-cli/src/lib.rs",
        "liken-cli/src/media/initramfs.rs", "liken-cli/src/media/mod.rs",
        "liken-cli/src/media/output.rs", "liken-cli/src/media/release.rs",
        "liken-cli/src/media/stick.rs", "liken-cli/src/plugins/mod.rs",
        "liken-cli/src/plugins/pull.rs", "liken-cli/src/releases/bundle.rs",
        "liken-cli/src/releases/index.rs", "liken-cli/src/releases/mod.rs",
        "liken-cli/src/scaffold.rs",
    ],
}

# ---------------------------------------------------------------------------
# Lexing: comments and literals out, tokens in.

TOKEN = re.compile(
    r"""
    (?P<ident>r\#[A-Za-z_][A-Za-z0-9_]*|[A-Za-z_][A-Za-z0-9_]*)
  | (?P<path>::)
  | (?P<punct>[{}()\[\];,*\#!=$<>])
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)


def strip(src):
    """Returns src with comments removed and literals' contents blanked,
    keeping line breaks (so a token's line number stays right)."""
    out = []
    i = 0
    n = len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            depth = 0
            j = i
            while j < n:
                if src.startswith("/*", j):
                    depth += 1
                    j += 2
                elif src.startswith("*/", j):
                    depth -= 1
                    j += 2
                    if depth == 0:
                        break
                else:
                    j += 1
            out.append("\n" * src.count("\n", i, j))
            i = j
            continue
        # Raw strings: r"..", r#".."#, br#".."#.
        m = re.match(r'b?r(#*)"', src[i:i + 300])
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = '"' + m.group(1)
            j = src.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
            continue
        if c == "'":
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", src[i:i + 12])
            if m:
                out.append("' '")
                i += m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


def tokens(src):
    text = strip(src)
    line = 1
    toks = []
    for m in TOKEN.finditer(text):
        kind = m.lastgroup
        value = m.group()
        if kind == "other":
            line += value.count("\n")
            continue
        toks.append((kind, value, line))
    return toks


# ---------------------------------------------------------------------------
# Parsing what matters: mod declarations, use trees, inline paths.


def skip_item(toks, i):
    """From toks[i], the start of an item, returns the index after it: after
    the first `;` outside brackets, or after the block that opens first."""
    depth = 0
    while i < len(toks):
        v = toks[i][1]
        if v in "([":
            depth += 1
        elif v in ")]":
            depth -= 1
        elif v == ";" and depth == 0:
            return i + 1
        elif v == "{" and depth == 0:
            return skip_block(toks, i)
        i += 1
    return i


def skip_block(toks, i):
    """toks[i] is `{`: returns the index after its matching `}`."""
    depth = 0
    while i < len(toks):
        v = toks[i][1]
        if v == "{":
            depth += 1
        elif v == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def attribute(toks, i):
    """toks[i] is `#`: returns (text of the attribute, index after it, inner)."""
    j = i + 1
    inner = j < len(toks) and toks[j][1] == "!"
    if inner:
        j += 1
    if j >= len(toks) or toks[j][1] != "[":
        return None, i + 1, inner
    depth = 0
    start = j
    while j < len(toks):
        v = toks[j][1]
        if v == "[":
            depth += 1
        elif v == "]":
            depth -= 1
            if depth == 0:
                break
        j += 1
    return "".join(t[1] for t in toks[start:j + 1]), j + 1, inner


def is_cfg_test(attr):
    """True for #[cfg(test)] and cfgs that need test (all(test, ..))."""
    if not attr.startswith("[cfg("):
        return False
    body = attr[len("[cfg("):]
    return body.startswith("test)") or body.startswith("all(test")


def parse_use_tree(toks, i, prefix, out):
    """Parses one use tree at toks[i]; appends (full path, local name) pairs
    to out (the name is None for a glob); returns the index after it."""
    segs = list(prefix)
    while i < len(toks):
        kind, v, _ = toks[i]
        if kind == "ident" and v != "as":
            segs.append(v)
            i += 1
            if i < len(toks) and toks[i][1] == "::":
                i += 1
                continue
            name = segs[-2] if v == "self" and len(segs) > 1 else v
            if v == "self":
                segs = segs[:-1]
            if i + 1 < len(toks) and toks[i][1] == "as":
                name = toks[i + 1][1]
                i += 2
            out.append((segs, name))
            return i
        if v == "*":
            out.append((segs, None))
            return i + 1
        if v == "{":
            i += 1
            while i < len(toks) and toks[i][1] != "}":
                if toks[i][1] == ",":
                    i += 1
                    continue
                i = parse_use_tree(toks, i, segs, out)
            return i + 1
        if v == "::":  # a leading `::`: an extern path, never resolved
            segs.append("::")
            i += 1
            continue
        return i + 1
    return i


class File:
    def __init__(self, path, module):
        self.path = path
        self.module = module  # tuple of segments from the crate root
        self.children = {}  # child module name -> module tuple
        self.uses = []  # (module tuple the path is written in, segments, line)
        self.decls = []  # (name, file path of the child)
        # module tuple -> {name a `use` brings in: the path it names}
        self.imports = {}


def parse_file(path, module, is_mod_rs):
    """Reads one source file at `module`; returns a File, or None if the
    whole file is #![cfg(test)]."""
    with open(path, encoding="utf-8") as f:
        toks = tokens(f.read())
    fil = File(path, module)
    base = os.path.dirname(path)
    if not is_mod_rs:
        base = os.path.join(base, os.path.splitext(os.path.basename(path))[0])
    # Stack of (module tuple, brace depth where it closes).
    stack = [(module, None)]
    depth = 0
    i = 0
    while i < len(toks):
        kind, v, line = toks[i]
        cur = stack[-1][0]
        if v == "#":
            attr, j, inner = attribute(toks, i)
            if attr and is_cfg_test(attr):
                if inner and depth == 0 and len(stack) == 1:
                    return None
                if not inner:
                    # Skip any further attributes, then the item.
                    while j < len(toks) and toks[j][1] == "#":
                        _, j, _ = attribute(toks, j)
                    i = skip_item(toks, j)
                    continue
            i = j
            continue
        if kind == "ident" and v == "mod" and i + 2 < len(toks) and toks[i + 1][0] == "ident":
            name = toks[i + 1][1]
            nxt = toks[i + 2][1]
            if nxt == ";":
                fil.decls.append((cur + (name,), name))
                fil.children[name] = cur + (name,)
                i += 3
                continue
            if nxt == "{":
                fil.children[name] = cur + (name,)
                depth += 1
                stack.append((cur + (name,), depth))
                i += 3
                continue
        if v == "{":
            depth += 1
        elif v == "}":
            if stack[-1][1] == depth:
                stack.pop()
            depth -= 1
        if kind == "ident" and v == "use":
            out = []
            j = parse_use_tree(toks, i + 1, [], out)
            for segs, name in out:
                fil.uses.append((cur, segs, line, True))
                if name is not None and segs:
                    fil.imports.setdefault(cur, {})[name] = segs
            i = j
            continue
        if (
            kind == "ident"
            and i + 2 < len(toks)
            and toks[i + 1][1] == "::"
            and toks[i + 2][0] == "ident"
            and (i == 0 or toks[i - 1][1] not in ("::", "$", "."))
        ):
            # A path written inline: `crate::sys::Sys`, `super::Error`, or
            # one from a child module or an imported name (`command::run`
            # in sys/mod.rs), resolved once the whole tree is known. A
            # `$crate` path is the macro caller's.
            segs = [v]
            j = i + 1
            while j + 1 < len(toks) and toks[j][1] == "::" and toks[j + 1][0] == "ident":
                segs.append(toks[j + 1][1])
                j += 2
            fil.uses.append((cur, segs, line, False))
            i = j
            continue
        i += 1
    fil.base = base
    return fil


PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;')


def load_root(root_path):
    """Walks the module tree from one crate root; returns {module tuple:
    File} and {module tuple: file path} (inline modules map to their
    file)."""
    files = {}
    owner = {}
    todo = [(root_path, (), True)]
    path_attrs = {}
    while todo:
        path, module, is_mod_rs = todo.pop()
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        for m in PATH_ATTR.finditer(raw):
            path_attrs[(path, m.group(2))] = os.path.normpath(
                os.path.join(os.path.dirname(path), m.group(1))
            )
        fil = parse_file(path, module, is_mod_rs)
        if fil is None:
            continue
        files[module] = fil
        owner[module] = path
        for child in fil.children.values():
            owner.setdefault(child, path)
        for child_mod, name in fil.decls:
            if (path, name) in path_attrs:
                child_path = path_attrs[(path, name)]
                todo.append((child_path, child_mod, os.path.basename(child_path) == "mod.rs"))
                continue
            # Inline parents (mod a { mod b; }) put b under the inline dirs.
            sub = child_mod[len(module):-1]
            d = os.path.join(fil.base, *sub)
            flat = os.path.join(d, name + ".rs")
            nested = os.path.join(d, name, "mod.rs")
            if os.path.exists(flat):
                todo.append((flat, child_mod, False))
            elif os.path.exists(nested):
                todo.append((nested, child_mod, True))
    # Children declared inline belong to their file.
    for fil in files.values():
        for child in fil.children.values():
            if child not in files:
                owner[child] = fil.path
    return files, owner


def resolve(cur, segs, modules, imports, depth=0):
    """Returns the module tuple a path written in module `cur` reaches, or
    None for a path outside the crate. That is the longest prefix of the
    path that is a module; when the next segment is a name that module
    only imports (`pub use children::ChildTable`), the path is followed to
    where the name comes from, so a file depends on the file that defines
    what it uses, not on one that passes the name on."""
    if not segs:
        return None
    if segs[0] == "crate":
        base = ()
        rest = segs[1:]
    elif segs[0] in ("super", "self"):
        base = cur
        rest = segs
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                if not base:
                    return None
                base = base[:-1]
            rest = rest[1:]
    elif cur + (segs[0],) in modules:
        base = cur
        rest = segs
    elif segs[0] in imports.get(cur, {}) and depth < 8:
        # A name this module imported (`use crate::net;` then
        # `net::daemon::spawn`): follow the import.
        via = imports[cur][segs[0]]
        if via == segs[:1]:
            return None
        return resolve(cur, list(via) + list(segs[1:]), modules, imports, depth + 1)
    else:
        return None
    target = base
    k = 0
    while k < len(rest) and target + (rest[k],) in modules:
        target = target + (rest[k],)
        k += 1
    if k < len(rest) and depth < 8:
        via = imports.get(target, {}).get(rest[k])
        if via is not None:
            followed = resolve(target, list(via) + list(rest[k + 1:]), modules, imports, depth + 1)
            if followed is not None:
                return followed
    return target


def graph(root_path):
    """Returns {file: {imported file: first line}} for one crate root."""
    files, owner = load_root(root_path)
    modules = set(owner)
    imports = {}
    for fil in files.values():
        imports.update(fil.imports)
    edges = {}
    for fil in files.values():
        out = edges.setdefault(fil.path, {})
        for cur, segs, line, _in_use in fil.uses:
            target = resolve(cur, segs, modules, imports)
            if target is None:
                continue
            dest = owner.get(target)
            if dest is None or dest == fil.path:
                continue
            out.setdefault(dest, line)
    return edges


# ---------------------------------------------------------------------------
# Checks.


def circles(edges):
    """Returns the strongly connected components of more than one file
    (Tarjan), each as a sorted list."""
    index = {}
    low = {}
    on = set()
    stack = []
    found = []
    counter = [0]

    def visit(v):
        # Iterative, so a deep module tree cannot overflow Python's stack.
        work = [(v, iter(sorted(edges.get(v, {}))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
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
                    found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def cycle_in(comp, edges):
    """One concrete circle through the component's first file, as a list of
    files that ends where it starts (breadth first: the shortest)."""
    members = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges.get(v, {})):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                path.reverse()
                return path + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def check_root(crate_dir, root_path, layers, rel, known):
    """Returns (problems, notes), lists of strings, for one crate root."""
    problems = []
    notes = []
    edges = graph(root_path)
    ground = layers.get("ground", [])
    top = layers.get("top", [])
    for comp in circles(edges):
        allowed = known.get(rel(root_path))
        if allowed is not None and set(rel(f) for f in comp) <= set(allowed):
            notes.append(
                f"known import circle among {len(comp)} files of {rel(root_path)} "
                "(scripts/import-layers.py, KNOWN_CIRCLES): not mended yet"
            )
            continue
        cyc = cycle_in(comp, edges)
        steps = " -> ".join(
            f"{rel(a)}:{edges[a][b]}" for a, b in zip(cyc, cyc[1:])
        )
        problems.append(
            f"import circle among {len(comp)} files of {rel(root_path)}: "
            + ", ".join(rel(f) for f in comp)
            + f"\n  for example: {steps} -> {rel(cyc[-1])}"
            + "\n  (each file:line imports the next; move what they share into a module below both)"
        )
    src = os.path.join(crate_dir, "src")

    def within(f, layer):
        r = os.path.relpath(f, src).replace(os.sep, "/")
        return any(r == g or (g.endswith("/") and r.startswith(g)) for g in layer)

    for f, outs in sorted(edges.items()):
        if within(f, top):
            continue
        for dest, line in sorted(outs.items()):
            if within(dest, top):
                problems.append(
                    f"{rel(f)}:{line} imports {rel(dest)}, which is on top ({', '.join(top)}): "
                    "only the top imports the top; move what it needs below"
                )
    if ground:
        is_ground = lambda f: within(f, ground)
        for f, outs in sorted(edges.items()):
            if not is_ground(f):
                continue
            for dest, line in sorted(outs.items()):
                if is_ground(dest):
                    continue
                if edges.get(dest):
                    problems.append(
                        f"{rel(f)}:{line} is a ground module ({', '.join(ground)}) and imports "
                        f"{rel(dest)}, which imports the crate's other modules: the ground "
                        "imports only itself and leaf utilities"
                    )
    return problems, notes


def crate_roots(crate_dir):
    roots = []
    src = os.path.join(crate_dir, "src")
    for name in ("lib.rs", "main.rs"):
        p = os.path.join(src, name)
        if os.path.exists(p):
            roots.append(p)
    for sub in ("src/bin", "tests", "benches", "examples"):
        d = os.path.join(crate_dir, sub)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            p = os.path.join(d, name)
            if name.endswith(".rs") and os.path.isfile(p):
                roots.append(p)
            elif os.path.isfile(os.path.join(p, "main.rs")):
                roots.append(os.path.join(p, "main.rs"))
    return roots


def workspace_crates(ws):
    crates = []
    for name in sorted(os.listdir(ws)):
        d = os.path.join(ws, name)
        if os.path.isfile(os.path.join(d, "Cargo.toml")) and os.path.isdir(os.path.join(d, "src")):
            crates.append(d)
    return crates


def check_workspace(ws, layers, known=None):
    """Returns (problems, notes) for every crate root under ws."""
    problems = []
    notes = []
    rel = lambda p: os.path.relpath(p, ws).replace(os.sep, "/")
    for crate in workspace_crates(ws):
        crate_layers = layers.get(os.path.basename(crate), {})
        for root in crate_roots(crate):
            p, n = check_root(crate, root, crate_layers, rel, known or {})
            problems += p
            notes += n
    return problems, notes


# ---------------------------------------------------------------------------
# Self-test: fixtures the check must reject and accept.

FIXTURES = {
    # a.rs and b.rs import each other (one through a brace group, one
    # inline); the check must name both.
    "circle": {
        "src/lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
        "src/a.rs": "use crate::{c, b::Thing};\n",
        "src/b.rs": "pub struct Thing;\npub fn f() { crate::a::g() }\n",
        "src/c.rs": "",
    },
    # A parent and a child in a circle through `super::` and a child path.
    "parent": {
        "src/lib.rs": "pub mod sys;\n",
        "src/sys/mod.rs": "mod command;\npub use command::run;\npub struct Error;\n",
        "src/sys/command.rs": "use super::Error;\npub fn run() {}\n",
    },
    # The ground reaching up into a step that imports the crate.
    "ground": {
        "src/lib.rs": "pub mod sys;\npub mod step;\npub mod util;\n",
        "src/sys/mod.rs": "use crate::step::Step;\nuse crate::util::leaf;\n",
        "src/step.rs": "use crate::util::leaf;\npub struct Step;\n",
        "src/util.rs": "pub fn leaf() {}\n",
    },
    # A step reaching up into the table that runs the steps.
    "top": {
        "src/lib.rs": "pub mod step;\npub mod table;\n",
        "src/step.rs": "pub fn names() -> usize { crate::table::STEPS.len() }\n",
        "src/table.rs": "pub const STEPS: &[&str] = &[];\n",
    },
    # A name passed on by a re-export is the defining file's: b.rs uses
    # c.rs's Thing through a.rs, which imports b.rs; no circle.
    "reexport": {
        "src/lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
        "src/a.rs": "pub use crate::c::Thing as Renamed;\nuse crate::b::f;\n",
        "src/b.rs": "use crate::a::Renamed;\npub fn f() {}\n",
        "src/c.rs": "pub struct Thing;\n",
    },
    # What must pass: tests, comments and strings may name anything; a
    # `$crate` path belongs to the caller; layers that point one way.
    "clean": {
        "src/lib.rs": "pub mod sys;\npub mod step;\npub mod util;\nmod table;\n",
        "src/sys/mod.rs": "//! Uses [`crate::step`] in a comment.\nuse crate::util::leaf;\n"
        "/* crate::step::Step */\nconst S: &str = \"crate::step::Step\";\n"
        "#[cfg(test)]\nmod tests {\n    use crate::step::Step;\n}\n"
        "#[cfg(test)]\nfn helper() -> crate::step::Step { crate::step::Step }\n"
        "macro_rules! m { () => { $crate::step::Step } }\n",
        "src/step.rs": "use crate::sys;\nuse crate::util::leaf;\npub struct Step;\n"
        "#[cfg(test)]\nmod tests;\n",
        "src/step/tests.rs": "use crate::table;\n",
        "src/table.rs": "use crate::step::{self, Step};\nfn r#loop(c: char) -> bool { c == '{' }\n",
        "src/util.rs": "pub fn leaf() -> &'static str { r#\"crate::table\"# }\n",
    },
}


def self_test():
    import tempfile

    failures = []
    layers = {"fixture": {"ground": ["sys/"], "top": ["table.rs"]}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, tree in FIXTURES.items():
            crate = os.path.join(tmp, name, "fixture")
            for rel_path, text in tree.items():
                p = os.path.join(crate, rel_path)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "w", encoding="utf-8") as f:
                    f.write(text)
            with open(os.path.join(crate, "Cargo.toml"), "w") as f:
                f.write("[package]\nname = \"fixture\"\n")
            got, _ = check_workspace(os.path.join(tmp, name), layers)
            text = "\n".join(got)
            if name == "circle":
                ok = len(got) == 1 and "fixture/src/a.rs" in text and "fixture/src/b.rs" in text \
                    and "fixture/src/c.rs" not in text
            elif name == "parent":
                ok = len(got) == 1 and "sys/mod.rs" in text and "sys/command.rs" in text
            elif name == "ground":
                ok = len(got) == 1 and "fixture/src/sys/mod.rs:1" in text and "step.rs" in text \
                    and "util.rs" not in text
            elif name == "top":
                ok = len(got) == 1 and "fixture/src/step.rs:1 imports fixture/src/table.rs" in text
            else:  # clean, reexport
                ok = got == []
            if not ok:
                failures.append(f"fixture {name}: got {got!r}")
    for f in failures:
        print("import-layers self-test:", f, file=sys.stderr)
    if failures:
        return 1
    print(f"import-layers self-test: {len(FIXTURES)} fixtures as expected")
    return 0


def main(argv):
    if argv[1:2] == ["--self-test"]:
        return self_test()
    ws = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems, notes = check_workspace(ws, LAYERS, KNOWN_CIRCLES)
    for n in notes:
        print("import-layers:", n)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(
            f"import-layers: {len(problems)} problem(s); modules must import in one direction "
            "(docs/init.md, Layers)",
            file=sys.stderr,
        )
        return 1
    known = f" other than the {len(notes)} known above" if notes else ""
    print(f"import-layers: no import circle{known} in {len(workspace_crates(ws))} crates")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
