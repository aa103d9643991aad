#!/usr/bin/env python3
"""Write the Python surface of one TensorRT release as JSON, read from NVIDIA's own pybind11 binding sources.

    python scripts/trt_surface.py REFERENCE/tensorrt/8.5.2 -o tests/trt_surfaces/8.5.2.json

REFERENCE/tensorrt/VERSION holds NVIDIA's ``python/src/infer/py*.cpp`` and ``parsers/pyOnnx.cpp`` at that tag, and
the ``NvInfer*.h`` headers (github.com/NVIDIA/TensorRT, Apache-2.0). The surface lists every class the ``tensorrt``
module binds (its bases, whether Python can construct it, and each method and property with whether it can be
written), every enum with its members and their integer values (from the headers), the module's functions and
attributes, and which of them exist only in the full module (``#if EXPORT_ALL_BINDINGS``: absent from the lean
runtime). The test stand-in for ``tensorrt`` is built from this file, so it refuses what the release lacks.

Nothing is guessed from our own code: the only facts not in the C++ sources are the few names the wheel's
``tensorrt/__init__.py`` adds in Python (``PACKAGE_ADDITIONS``).
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

BINDING_FILES = ("pyFoundationalTypes.cpp", "pyCore.cpp", "pyGraph.cpp", "pyInt8.cpp", "pyOnnx.cpp")
HEADERS = ("NvInferRuntimeBase.h", "NvInferRuntimeCommon.h", "NvInferRuntime.h", "NvInfer.h")

# What tensorrt/__init__.py adds in Python on top of the C++ module, in every release from 8.x to 10.x:
# __version__, volume(), nptype() and DataType.itemsize (https://github.com/NVIDIA/TensorRT/blob/release/8.6/
# python/packaging/tensorrt/__init__.py; .../release/10.3/python/packaging/bindings_wheel/tensorrt/__init__.py).
PACKAGE_ADDITIONS = {
    "functions": ["nptype", "volume"],
    "attributes": ["__version__"],
    "class_members": {"DataType": ["itemsize"]},
}

# Preprocessor conditions of the binding sources: False = not compiled into the released wheels.
CONDITIONS = {"ENABLE_INETWORK_SERIALIZE": False, "EXPORT_ALL_BINDINGS": True}
_MEMBER_CALLS = {
    "def": "method",
    "def_static": "method",
    "def_property": "property",
    "def_property_readonly": "property",
    "def_readwrite": "property",
    "def_readonly": "property",
}


def strip_comments(text: str) -> str:
    """C++ source with comments blanked out (string and char literals kept, line numbers kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def preprocess(text: str) -> Tuple[str, List[Tuple[int, int]]]:
    """Drop lines under a false ``#if``; return the text and the character spans under ``#if EXPORT_ALL_BINDINGS``."""
    lines = text.split("\n")
    keep: List[str] = []
    stack: List[Tuple[str, bool]] = []  # (condition, active)
    full_only: List[Tuple[int, int]] = []
    start: Optional[int] = None
    pos = 0
    for line in lines:
        s = line.strip()
        m = re.match(r"#\s*if(?:def)?\s+(\w+)", s)
        if m:
            name = m.group(1)
            stack.append((name, CONDITIONS.get(name, True)))
            if name == "EXPORT_ALL_BINDINGS":
                start = pos
            keep.append("")
        elif re.match(r"#\s*else", s) and stack:
            name, active = stack.pop()
            stack.append((name, not active if name in CONDITIONS else True))
            keep.append("")
        elif re.match(r"#\s*endif", s) and stack:
            name, _ = stack.pop()
            if name == "EXPORT_ALL_BINDINGS" and start is not None:
                full_only.append((start, pos))
                start = None
            keep.append("")
        elif all(active for _, active in stack):
            keep.append(line)
        else:
            keep.append("")
        pos += len(keep[-1]) + 1
    return "\n".join(keep), full_only


def balanced(text: str, i: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes the one at ``i`` (strings skipped)."""
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            continue
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError(f"unbalanced {open_} at {i}")


def template_args(text: str, i: int) -> Tuple[List[str], int]:
    """``<A, B<C>, D>`` at ``i`` -> (['A', 'B<C>', 'D'], index after '>')."""
    end = balanced(text, i, "<", ">")
    return split_args(text[i + 1 : end - 1]), end


def first_string(args: str) -> Optional[str]:
    m = re.search(r'"((?:[^"\\]|\\.)*)"', args)
    return m.group(1) if m else None


def split_args(args: str) -> List[str]:
    parts, depth, cur, quote = [], 0, "", None
    for c in args:
        if quote:
            cur += c
            if c == quote:
                quote = None
            continue
        if c in "\"'":
            quote = c
        elif c in "<({[":
            depth += 1
        elif c in ">)}]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur.strip())
    return parts


def chain(text: str, i: int) -> Tuple[List[Tuple[str, str, int]], int]:
    """The ``.call(args)`` chain starting at ``i``: [(call, args, offset)], and the index after it."""
    calls = []
    n = len(text)
    while True:
        j = i
        while j < n and text[j].isspace():
            j += 1
        if j >= n or text[j] != ".":
            return calls, j
        m = re.match(r"\.\s*(\w+)\s*(\()", text[j:])
        if not m:
            return calls, j
        open_at = j + m.start(2)
        end = balanced(text, open_at, "(", ")")
        calls.append((m.group(1), text[open_at + 1 : end - 1], j))
        i = end


class Binder:
    """Collects classes, enums and module functions from the binding sources of one release."""

    def __init__(self) -> None:
        self.classes: Dict[str, dict] = {}
        self.enums: Dict[str, dict] = {}
        self.cpp_to_py: Dict[str, str] = {}  # C++ type -> Python name (classes and enums)
        self.pending_bases: Dict[str, List[str]] = {}
        self.functions: Dict[str, dict] = {}
        self.attributes: Dict[str, Optional[str]] = {}

    def add_file(self, text: str) -> None:
        text, full_only = preprocess(strip_comments(text))

        def is_full_only(at: int) -> bool:
            return any(a <= at < b for a, b in full_only)

        variables: Dict[str, str] = {}  # binding variable -> Python name
        for m in re.finditer(r"py::(class_|enum_)\s*<", text):
            kind = m.group(1)
            targs, after = template_args(text, m.end() - 1)
            rest = text[after:]
            var = re.match(r"\s*(\w+)\s*([{(])", rest)
            call = re.match(r"\s*\(", rest)
            if call:
                open_at = after + call.end() - 1
                close = ")"
                variable = None
            elif var:
                open_at = after + var.start(2)
                close = "}" if var.group(2) == "{" else ")"
                variable = var.group(1)
            else:
                continue
            end = balanced(text, open_at, "({"[close == "}"], close)
            args = split_args(text[open_at + 1 : end - 1])
            name = first_string(text[open_at + 1 : end - 1])
            if name is None:
                continue
            scope = args[0] if args else "m"
            parent = variables.get(scope) or self._class_by_var(scope)
            calls, _ = chain(text, end)
            full = is_full_only(m.start())
            if kind == "enum_":
                qual = f"{parent}.{name}" if parent else name
                self.enums[qual] = {"cpp": targs[0], "scope": parent, "values": {}, "exported": False, "full_only": full}
                self.cpp_to_py[targs[0]] = qual
                self._apply_enum(qual, calls)
            else:
                self.classes.setdefault(name, {"cpp": targs[0], "bases": [], "init": False, "full_only": full, "members": {}})
                self.cpp_to_py[targs[0]] = name
                self.pending_bases[name] = targs[1:]
                if variable:
                    variables[variable] = name
                self._apply_calls(name, calls, is_full_only)
        # Statements on a binding variable: `binding.def(...)...;`
        for variable, name in variables.items():
            for m in re.finditer(rf"(?<![\w.]){re.escape(variable)}\s*(?=\.)", text):
                calls, _ = chain(text, m.end())
                self._apply_calls(name, calls, is_full_only)
        for m in re.finditer(r"(?<![\w.])m\s*\.\s*def\s*\(", text):
            end = balanced(text, m.end() - 1, "(", ")")
            fname = first_string(text[m.end() : end - 1])
            if fname:
                self.functions[fname] = {"full_only": is_full_only(m.start())}
        for m in re.finditer(r'(?<![\w.])m\s*\.\s*attr\s*\(\s*"(\w+)"\s*\)\s*=\s*([^;]+);', text):
            value = m.group(2).strip()
            self.attributes[m.group(1)] = value

    def _class_by_var(self, scope: str) -> Optional[str]:
        return None if scope == "m" else None

    def _apply_enum(self, qual: str, calls: List[Tuple[str, str, int]]) -> None:
        enum = self.enums[qual]
        for call, args, _ in calls:
            if call == "value":
                parts = split_args(args)
                enum["values"][first_string(args)] = parts[1] if len(parts) > 1 else None
            elif call == "export_values":
                enum["exported"] = True

    def _apply_calls(self, name: str, calls: List[Tuple[str, str, int]], is_full_only) -> None:
        cls = self.classes[name]
        for call, args, at in calls:
            if call == "def" and re.match(r"\s*py::init", args):
                cls["init"] = True
                continue
            kind = _MEMBER_CALLS.get(call)
            if kind is None:
                continue
            member = first_string(args)
            if member is None:
                continue
            parts = split_args(args)
            entry = {"kind": kind, "deprecated": "deprecate" in args, "full_only": is_full_only(at)}
            if kind == "property":
                getter = parts[1] if len(parts) > 1 else ""
                setter = parts[2] if call == "def_property" and len(parts) > 2 else ""
                entry["readable"] = getter != "nullptr"
                entry["writable"] = call == "def_readwrite" or (call == "def_property" and setter not in ("", "nullptr"))
                if call == "def_property" and setter and not _looks_like_callable(setter):
                    entry["writable"] = False  # the third argument is a doc string, not a setter
            if call == "def_static":
                entry["static"] = True
            old = cls["members"].get(member)
            if old is not None:  # overloads: one member, deprecated only if every overload is
                entry["deprecated"] = entry["deprecated"] and old["deprecated"]
            cls["members"][member] = entry

    def resolve_bases(self) -> None:
        for name, targs in self.pending_bases.items():
            self.classes[name]["bases"] = [
                self.cpp_to_py[t] for t in targs if t in self.cpp_to_py and t != self.classes[name]["cpp"]
            ]


def _looks_like_callable(arg: str) -> bool:
    return bool(re.match(r"\s*(&|\[|py::cpp_function|utils::|lambdas::|\w+::\w+)", arg)) and not re.search(r"Doc::", arg)


# -- enum values from the headers ---------------------------------------------------------------------------------

_OPS = {ast.LShift: operator.lshift, ast.BitOr: operator.or_, ast.Add: operator.add, ast.Sub: operator.sub}


def _int_expr(expr: str, known: Dict[str, int]) -> Optional[int]:
    expr = re.sub(r"(\d)[uUlL]+\b", r"\1", expr.strip())
    expr = re.sub(r"\b(?:int32_t|uint32_t|int64_t|static_cast<\w+>)\s*\(", "(", expr)
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name) and node.id in known:
            return known[node.id]
        if isinstance(node, ast.Attribute) and node.attr in known:
            return known[node.attr]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(expr)

    try:
        return ev(tree)
    except (ValueError, TypeError):
        return None


def header_enums(texts: List[str]) -> Dict[str, Dict[str, int]]:
    """{enum name: {enumerator: value}} for every ``enum class X : T { ... };`` in the headers."""
    out: Dict[str, Dict[str, int]] = {}
    for text in texts:
        text = strip_comments(text).replace("::", ".")
        for m in re.finditer(r"\benum\s+(?:class\s+)?(\w+)\s*(?::\s*[\w.]+\s*)?\{([^{}]*)\}\s*;", text):
            values: Dict[str, int] = {}
            nxt = 0
            for item in m.group(2).split(","):
                item = item.strip()
                if not item:
                    continue
                name, _, expr = item.partition("=")
                name = name.strip()
                if not re.fullmatch(r"\w+", name):
                    continue
                value = _int_expr(expr, values) if expr.strip() else nxt
                if value is None:
                    value = nxt
                values[name] = value
                nxt = value + 1
            out.setdefault(m.group(1), values)
    return out


def enum_values(binder: Binder, headers: Dict[str, Dict[str, int]]) -> None:
    for enum in binder.enums.values():
        cpp_enum = enum["cpp"].split("::")[-1]
        table = headers.get(cpp_enum, {})
        values = {}
        for index, (name, cpp) in enumerate(enum["values"].items()):
            enumerator = (cpp or "").split("::")[-1]
            values[name] = table.get(enumerator, index)
        enum["values"] = values


def surface(folder: Path, origin: str = "") -> dict:
    version = folder.name
    binder = Binder()
    present = [name for name in BINDING_FILES if (folder / name).is_file()]  # 11.0 dropped pyInt8.cpp (calibrators)
    for name in present:
        binder.add_file((folder / name).read_text(encoding="utf-8"))
    binder.resolve_bases()
    headers = header_enums([(folder / h).read_text(encoding="utf-8") for h in HEADERS if (folder / h).is_file()])
    enum_values(binder, headers)
    for cls, names in PACKAGE_ADDITIONS["class_members"].items():
        target = binder.classes.get(cls) or binder.enums.get(cls)
        if target is not None:
            target.setdefault("python_members", []).extend(names)
    classes = {}
    for name, cls in sorted(binder.classes.items()):
        classes[name] = {k: v for k, v in cls.items() if k != "cpp"}
        classes[name]["members"] = dict(sorted(cls["members"].items()))
    enums = {}
    for qual, enum in sorted(binder.enums.items()):
        enums[qual] = {k: v for k, v in enum.items() if k != "cpp"}
    attributes = {k: v.replace("DataType::k", "DataType.") for k, v in sorted(binder.attributes.items())}
    return {
        "version": version,
        "source": f"NVIDIA TensorRT {version} Python bindings ({', '.join(present)}) and headers{origin}; see scripts/trt_surface.py",
        "classes": classes,
        "enums": enums,
        "functions": dict(sorted(binder.functions.items())),
        "attributes": attributes,
        "package": {"functions": PACKAGE_ADDITIONS["functions"], "attributes": PACKAGE_ADDITIONS["attributes"]},
    }


def render(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, help="reference/tensorrt/VERSION")
    p.add_argument("-o", "--output", type=Path, help="write here (default: stdout)")
    p.add_argument("--origin", default="", help="where the sources came from, when not ../shared/reference (a commit)")
    args = p.parse_args(argv)
    if not (args.folder / "pyCore.cpp").is_file():
        print(f"{args.folder}: no pyCore.cpp here; pass reference/tensorrt/VERSION", file=sys.stderr)
        return 2
    text = render(surface(args.folder, f" ({args.origin})" if args.origin else ""))
    if args.output:
        from edge.outputs import write_atomic

        write_atomic(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
