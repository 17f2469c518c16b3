"""A small evaluator for the Terraform expressions infra/ uses, so offline checks can evaluate them.

python-hcl2 hands expressions over as text ("${var.a == \"\" ? 1 : 0}"). This module parses that
text (HCL's expression grammar: literals, templates, references with attribute/index/splat
access, function calls, operators, conditionals, tuple/object constructors and `for`
expressions) and evaluates it with Terraform's semantics for the functions infra/ calls.
Anything else raises Unsupported, so a check built on it fails instead of guessing.

Values: str, int/float, bool, None, list, dict; UNKNOWN for values only known at apply time
(resource attributes), which propagates through every operation like Terraform's unknowns.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class Unsupported(Exception):  # noqa: N818 - reads as "unsupported HCL", raised by name in tests
    """An expression or function this evaluator does not implement."""


class EvalError(Exception):
    """What Terraform would report as an error (unknown name, wrong type, bad index...)."""


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()


# ------------------------------------------------------------------ scanning
def interpolations(template: str) -> list[str]:
    """The expression texts of the top-level ${...} sequences of a template string."""
    out, i = [], 0
    while True:
        start = _find_interp(template, i)
        if start < 0:
            return out
        end = _match_brace(template, start + 2)
        out.append(template[start + 2 : end])
        i = end + 1


def _find_interp(text: str, i: int) -> int:
    while True:
        j = text.find("${", i)
        if j < 0:
            return -1
        if j > 0 and text[j - 1] == "$" and (j < 2 or text[j - 2] != "$"):
            i = j + 2  # $${ is a literal ${
            continue
        return j


def _match_brace(text: str, i: int) -> int:
    """Index of the } closing an expression that starts at i (strings and nesting skipped)."""
    depth = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i = _skip_string(text, i)
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    raise EvalError(f"unterminated ${{ in {text!r}")


def _skip_string(text: str, i: int) -> int:
    """From an opening quote to just past its closing quote, nested ${...} included."""
    i += 1
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == '"':
            return i + 1
        if text.startswith("${", i) and not text.startswith("$${", i - 1 if i else 0):
            i = _match_brace(text, i + 2) + 1
            continue
        i += 1
    raise EvalError(f"unterminated string in {text!r}")


_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_-]*)
  | (?P<op>\.\.\.|==|!=|<=|>=|&&|\|\||=>|[?:!<>+\-*/%().,\[\]{}=])
""",
    re.X,
)


@dataclass
class Tok:
    kind: str  # number | ident | op | string | eof
    text: str
    parts: list = field(default_factory=list)  # string: [str | Node]


def tokenize(src: str) -> list[Tok]:
    toks, i = [], 0
    while i < len(src):
        if src[i] == '"':
            end = _skip_string(src, i)
            toks.append(Tok("string", src[i:end], _template_parts(src[i + 1 : end - 1])))
            i = end
            continue
        m = _TOKEN.match(src, i)
        if not m:
            raise Unsupported(f"cannot tokenize {src[i : i + 20]!r} in {src!r}")
        i = m.end()
        if m.lastgroup != "ws":
            toks.append(Tok(m.lastgroup, m.group()))
    toks.append(Tok("eof", ""))
    return toks


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u":
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append({"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}.get(nxt, "\\" + nxt))
            i += 2
            continue
        if text.startswith("$${", i) or text.startswith("%%{", i):
            out.append(text[i + 1 : i + 3])
            i += 3
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _template_parts(body: str) -> list:
    if "%{" in body.replace("%%{", ""):
        raise Unsupported(f"template directives in {body!r}")
    parts, i = [], 0
    while True:
        start = _find_interp(body, i)
        if start < 0:
            parts.append(_unescape(body[i:]))
            return [p for p in parts if p != ""]
        parts.append(_unescape(body[i:start]))
        end = _match_brace(body, start + 2)
        parts.append(parse(body[start + 2 : end]))
        i = end + 1


# ------------------------------------------------------------------ parsing
@dataclass(frozen=True)
class Node:
    kind: str
    args: tuple = ()

    def __repr__(self) -> str:
        return f"{self.kind}{self.args!r}"


class _Parser:
    def __init__(self, src: str):
        self.src = src
        self.toks = tokenize(src)
        self.i = 0

    def peek(self, offset: int = 0) -> Tok:
        return self.toks[min(self.i + offset, len(self.toks) - 1)]

    def take(self, text: str | None = None) -> Tok:
        tok = self.peek()
        if text is not None and tok.text != text:
            raise Unsupported(f"expected {text!r}, got {tok.text!r} in {self.src!r}")
        self.i += 1
        return tok

    def at(self, *texts: str) -> bool:
        tok = self.peek()
        return tok.kind in ("op", "ident") and tok.text in texts

    def expr(self) -> Node:
        cond = self.binary(0)
        if self.at("?"):
            self.take("?")
            then = self.expr()
            self.take(":")
            return Node("cond", (cond, then, self.expr()))
        return cond

    LEVELS = (("||",), ("&&",), ("==", "!="), ("<", ">", "<=", ">="), ("+", "-"), ("*", "/", "%"))

    def binary(self, level: int) -> Node:
        if level == len(self.LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek().kind == "op" and self.peek().text in self.LEVELS[level]:
            op = self.take().text
            left = Node("binop", (op, left, self.binary(level + 1)))
        return left

    def unary(self) -> Node:
        if self.at("!", "-"):
            op = self.take().text
            return Node("unop", (op, self.unary()))
        return self.postfix(self.primary())

    def postfix(self, node: Node) -> Node:
        while True:
            if self.at(".") and self.peek(1).kind in ("ident", "number"):
                self.take()
                node = Node("attr", (node, self.take().text))
            elif self.at(".") and self.peek(1).text == "*":
                self.take(), self.take()
                node = Node("splat", (node,))
            elif self.at("["):
                self.take()
                if self.at("*") and self.peek(1).text == "]":
                    self.take(), self.take("]")
                    node = Node("splat", (node,))
                else:
                    key = self.expr()
                    self.take("]")
                    node = Node("index", (node, key))
            else:
                return node

    def primary(self) -> Node:
        tok = self.peek()
        if tok.kind == "number":
            self.take()
            value = float(tok.text)
            return Node("lit", (int(value) if value.is_integer() and "." not in tok.text else value,))
        if tok.kind == "string":
            self.take()
            parts = tok.parts
            if all(isinstance(p, str) for p in parts):
                return Node("lit", ("".join(parts),))
            return Node("template", tuple(parts))
        if tok.kind == "ident":
            self.take()
            if tok.text in ("true", "false"):
                return Node("lit", (tok.text == "true",))
            if tok.text == "null":
                return Node("lit", (None,))
            if self.at("("):
                self.take("(")
                args, expand = [], False
                while not self.at(")"):
                    args.append(self.expr())
                    if self.at("..."):
                        self.take()
                        expand = True
                    if self.at(","):
                        self.take()
                self.take(")")
                if expand:
                    raise Unsupported(f"argument expansion in {self.src!r}")
                return Node("call", (tok.text, tuple(args)))
            return Node("var", (tok.text,))
        if self.at("("):
            self.take("(")
            inner = self.expr()
            self.take(")")
            return inner
        if self.at("["):
            self.take("[")
            if self.at("for"):
                return self.for_expr("]")
            items = []
            while not self.at("]"):
                items.append(self.expr())
                if self.at(","):
                    self.take()
            self.take("]")
            return Node("tuple", tuple(items))
        if self.at("{"):
            self.take("{")
            if self.at("for"):
                return self.for_expr("}")
            items = []
            while not self.at("}"):
                key_tok = self.peek()
                if key_tok.kind == "ident" and self.peek(1).text in ("=", ":"):
                    self.take()
                    key: Node = Node("lit", (key_tok.text,))
                else:
                    key = self.expr()
                if not self.at("=", ":"):
                    raise Unsupported(f"object item without = in {self.src!r}")
                self.take()
                items.append((key, self.expr()))
                if self.at(","):
                    self.take()
            self.take("}")
            return Node("object", tuple(items))
        raise Unsupported(f"unexpected {tok.text!r} in {self.src!r}")

    def for_expr(self, close: str) -> Node:
        self.take("for")
        first = self.take().text
        second = None
        if self.at(","):
            self.take()
            second = self.take().text
        self.take("in")
        coll = self.expr()
        self.take(":")
        key_expr = None
        value = self.expr()
        if close == "}":
            self.take("=>")
            key_expr, value = value, self.expr()
            if self.at("..."):
                raise Unsupported(f"grouping for expression in {self.src!r}")
        cond = None
        if self.at("if"):
            self.take()
            cond = self.expr()
        self.take(close)
        key_var, val_var = (first, second) if second else (None, first)
        return Node("for", (key_var, val_var, coll, key_expr, value, cond))


def parse(src: str) -> Node:
    parser = _Parser(src)
    node = parser.expr()
    if parser.peek().kind != "eof":
        raise Unsupported(f"trailing {parser.peek().text!r} in {src!r}")
    return node


# ------------------------------------------------------------------ references
def traversals(node: Node) -> list[tuple[str, list]]:
    """(root name, [accessors]) of every reference: accessors are ("attr", name), ("index", Node)
    or ("splat",). Iteration variables of `for` expressions are reported too (callers ignore
    what they do not check)."""
    found: list[tuple[str, list]] = []

    def chain(n: Node) -> tuple[str, list] | None:
        steps: list = []
        while n.kind in ("attr", "index", "splat"):
            if n.kind == "attr":
                steps.append(("attr", n.args[1]))
            elif n.kind == "index":
                steps.append(("index", n.args[1]))
                walk(n.args[1])
            else:
                steps.append(("splat",))
            n = n.args[0]
        if n.kind == "var":
            return n.args[0], list(reversed(steps))
        walk(n)
        return None

    def walk(n: Any) -> None:
        if isinstance(n, tuple):
            for item in n:
                walk(item)
            return
        if not isinstance(n, Node):
            return
        if n.kind in ("attr", "index", "splat", "var"):
            ref = chain(n)
            if ref:
                found.append(ref)
            return
        for arg in n.args:
            walk(arg)

    walk(node)
    return found


def expressions_in(value: Any) -> list[str]:
    """Every expression text inside a python-hcl2 value (strings with ${...}, nested lists/dicts)."""
    out: list[str] = []
    if isinstance(value, str):
        out += interpolations(value)
    elif isinstance(value, list):
        for item in value:
            out += expressions_in(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not str(key).startswith("__"):
                out += expressions_in(item)
    return out


# ------------------------------------------------------------------ evaluation
@dataclass
class Scope:
    """What names mean: variables, locals (python-hcl2 values, evaluated lazily), path.module,
    a resolver for resources/data/module references, and iteration variables."""

    variables: dict[str, Any] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    module_dir: Path | None = None
    resolve: Callable[[str, list], Any] | None = None
    bindings: dict[str, Any] = field(default_factory=dict)
    _local_values: dict[str, Any] = field(default_factory=dict)
    _evaluating: set[str] = field(default_factory=set)

    def child(self, **bindings: Any) -> Scope:
        return Scope(
            self.variables,
            self.locals,
            self.module_dir,
            self.resolve,
            {**self.bindings, **bindings},
            self._local_values,
            self._evaluating,
        )

    def local(self, name: str) -> Any:
        if name not in self._local_values:
            if name not in self.locals:
                raise EvalError(f"local.{name} is not declared")
            if name in self._evaluating:
                raise EvalError(f"local.{name} refers to itself")
            self._evaluating.add(name)
            try:
                self._local_values[name] = evaluate_value(self.locals[name], self.child())
            finally:
                self._evaluating.discard(name)
        return self._local_values[name]


def evaluate_value(value: Any, scope: Scope) -> Any:
    """A python-hcl2 attribute value: literal, template string, or nested list/dict of them."""
    if isinstance(value, str):
        compiled = _compile(value)
        return evaluate(compiled, scope) if isinstance(compiled, Node) else compiled
    if isinstance(value, list):
        return [evaluate_value(v, scope) for v in value]
    if isinstance(value, dict):
        return {k: evaluate_value(v, scope) for k, v in value.items() if not str(k).startswith("__")}
    return value


@functools.lru_cache(maxsize=16384)
def _compile(value: str) -> Node | str:
    """A string attribute's expression, parsed once per distinct text (the checks evaluate the same
    module in dozens of modes: parsing again took a quarter of their time); a literal stays a str."""
    if "${" not in value.replace("$${", ""):
        return value.replace("$${", "${")
    pieces = interpolations(value)
    if len(pieces) == 1 and value.strip() == "${" + pieces[0] + "}":
        return parse(pieces[0])
    return Node("template", tuple(_template_parts(_reescape(value))))


def _reescape(value: str) -> str:
    """python-hcl2 unescapes literal text around interpolations; escape it again for parsing."""
    out, i = [], 0
    for expr in interpolations(value):
        start = value.index("${" + expr + "}", i)
        out.append(value[i:start].replace("\\", "\\\\").replace('"', '\\"'))
        out.append("${" + expr + "}")
        i = start + len(expr) + 3
    out.append(value[i:].replace("\\", "\\\\").replace('"', '\\"'))
    return "".join(out)


def _known(*values: Any) -> bool:
    return not any(v is UNKNOWN for v in values)


def _tostr(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(int(value)) if float(value).is_integer() else repr(value)
    if isinstance(value, str):
        return value
    raise EvalError(f"cannot convert {value!r} to string")


def _tobool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise EvalError(f"a bool is required, got {value!r}")


def _tonum(value: Any) -> float | int:
    if isinstance(value, bool):
        raise EvalError(f"a number is required, got {value!r}")
    if isinstance(value, (int, float)):
        return value
    try:
        return int(value) if re.fullmatch(r"-?\d+", value) else float(value)
    except (TypeError, ValueError):
        raise EvalError(f"a number is required, got {value!r}") from None


def _go_regex(pattern: str) -> re.Pattern:
    # RE2 and Python agree on what infra/ uses; refuse constructs where they differ.
    if re.search(r"\(\?[=!<]|\\[Z]|\(\?P=", pattern.replace("(?P<", "")):
        raise Unsupported(f"regex construct outside RE2 in {pattern!r}")
    return re.compile(pattern)


def _regex_result(match: re.Match, pattern: re.Pattern) -> Any:
    names = list(pattern.groupindex)
    if pattern.groups == 0:
        return match.group(0)
    if names and len(names) != pattern.groups:
        raise EvalError("cannot mix named and unnamed capture groups")
    if names:
        return {n: match.group(n) for n in names}  # a group that did not take part: null
    return [match.group(i + 1) for i in range(pattern.groups)]


def _call(name: str, args: list, scope: Scope, raw: tuple) -> Any:
    if name == "can":
        try:
            value = evaluate(raw[0], scope)
        except EvalError:
            return False
        return UNKNOWN if value is UNKNOWN else True
    if name == "try":
        for node in raw:
            try:
                return evaluate(node, scope)
            except EvalError:
                continue
        raise EvalError("no try() argument succeeded")
    values = [evaluate(a, scope) for a in raw]
    if not _known(*values) and name not in ("merge", "concat", "tostring", "contains", "keys", "length", "one"):
        return UNKNOWN
    if name == "tostring":
        return UNKNOWN if values[0] is UNKNOWN else (None if values[0] is None else _tostr(values[0]))
    if name == "tonumber":
        return _tonum(values[0])
    if name == "tobool":
        return _tobool(values[0])
    if name == "join":
        sep, *lists = values
        items = [x for lst in lists for x in lst]
        if any(x is None for x in items):
            raise EvalError("join: element is null")
        if not _known(*items):
            return UNKNOWN
        return _tostr(sep).join(_tostr(x) for x in items)
    if name == "split":
        return values[1].split(values[0])
    if name == "trimsuffix":
        return values[0][: -len(values[1])] if values[1] and values[0].endswith(values[1]) else values[0]
    if name == "values":
        if isinstance(values[0], dict):
            return [values[0][k] for k in sorted(values[0])]
        raise EvalError("values: a map or object is required")
    if name == "sum":
        if not values[0]:
            raise EvalError("sum: cannot sum an empty list")
        return sum(_tonum(v) for v in values[0])
    if name == "compact":
        return [x for x in values[0] if x not in (None, "")]
    if name == "concat":
        if not _known(*values):
            return UNKNOWN
        return [x for lst in values for x in lst]
    if name == "merge":
        out: dict = {}
        for item in values:
            if item is UNKNOWN:
                return UNKNOWN
            if item is None:
                continue
            if not isinstance(item, dict):
                raise EvalError("merge: arguments must be maps or objects")
            out.update(item)
        return out
    if name == "contains":
        if values[0] is UNKNOWN:
            return UNKNOWN
        return values[1] in values[0]
    if name == "keys":
        if values[0] is UNKNOWN:
            return UNKNOWN
        return sorted(values[0])
    if name == "length":
        if values[0] is UNKNOWN:
            return UNKNOWN
        return len(values[0])
    if name == "one":
        if values[0] is UNKNOWN:
            return UNKNOWN
        if len(values[0]) > 1:
            raise EvalError("one: more than one element")
        return values[0][0] if values[0] else None
    if name == "toset":
        return sorted(set(values[0]), key=str)
    if name == "alltrue":
        return all(_tobool(v) for v in values[0])
    if name == "regex":
        pattern = _go_regex(values[0])
        match = pattern.search(values[1])
        if not match:
            raise EvalError("regex: pattern did not match any part of the given string")
        return _regex_result(match, pattern)
    if name == "regexall":
        pattern = _go_regex(values[0])
        return [_regex_result(m, pattern) for m in pattern.finditer(values[1])]
    if name == "replace":  # the plain-string form (infra/ uses no /regex/ form)
        if values[1].startswith("/") and values[1].endswith("/"):
            raise Unsupported("replace() with a regular expression")
        return values[0].replace(values[1], values[2])
    if name == "jsondecode":
        return json.loads(values[0])
    if name == "jsonencode":
        return jsonencode(values[0])
    if name == "flatten":
        return _flatten(values[0])
    if name in ("min", "max"):
        if not values:
            raise EvalError(f"{name}: at least one argument")
        numbers = [_tonum(v) for v in values]
        return min(numbers) if name == "min" else max(numbers)
    if name == "abs":
        return abs(_tonum(values[0]))
    if name == "distinct":
        out_list: list = []
        for item in values[0]:
            if not any(_equal(item, seen) for seen in out_list):
                out_list.append(item)
        return out_list
    if name == "file":
        return Path(values[0]).read_text(encoding="utf-8")
    if name == "base64encode":
        return base64.b64encode(values[0].encode()).decode()
    if name == "lookup":
        if values[1] in values[0]:
            return values[0][values[1]]
        if len(values) > 2:
            return values[2]
        raise EvalError(f"lookup: no key {values[1]!r}")
    if name == "coalesce":
        for v in values:
            if v not in (None, ""):
                return v
        raise EvalError("coalesce: no non-null argument")
    raise Unsupported(f"function {name}()")


def jsonencode(value: Any) -> str:
    """Terraform's jsonencode(): keys sorted, no spaces, whole numbers without a fraction, and Go's
    escapes of <, > and & (and U+2028/U+2029)."""

    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(v[k]) for k in sorted(v)}
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, float) and v.is_integer():
            return int(v)
        return v

    text = json.dumps(plain(value), separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    for char, escape in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escape)
    return text


def _flatten(value: Any) -> list:
    out: list = []
    for item in value:
        if isinstance(item, list):
            out.extend(_flatten(item))
        else:
            out.append(item)
    return out


def _index(coll: Any, key: Any) -> Any:
    if coll is UNKNOWN or key is UNKNOWN:
        return UNKNOWN
    if key is None:
        raise EvalError("cannot use a null value as an index")
    if isinstance(coll, dict):
        key = _tostr(key)
        if key not in coll:
            raise EvalError(f"no element {key!r} (has {sorted(coll)})")
        return coll[key]
    if isinstance(coll, list):
        idx = int(_tonum(key))
        if not 0 <= idx < len(coll):
            raise EvalError(f"index {idx} out of range for {len(coll)} elements")
        return coll[idx]
    if coll is None:
        raise EvalError("cannot index a null value")
    raise EvalError(f"cannot index {type(coll).__name__}")


def _attr(value: Any, name: str) -> Any:
    if value is UNKNOWN:
        return UNKNOWN
    if isinstance(value, dict):
        if name not in value:
            raise EvalError(f"no attribute {name!r} (has {sorted(value)})")
        return value[name]
    if isinstance(value, list) and re.fullmatch(r"\d+", name):
        return _index(value, int(name))
    raise EvalError(f"cannot read .{name} of {type(value).__name__}")


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return (type(a) is type(b) and a == b) or (a is None and b is None)


def evaluate(node: Node, scope: Scope) -> Any:
    kind, args = node.kind, node.args
    if kind == "lit":
        return args[0]
    if kind == "template":
        out = []
        for part in args:
            value = part if isinstance(part, str) else evaluate(part, scope)
            if value is UNKNOWN:
                return UNKNOWN
            if value is None:
                raise EvalError("template interpolation of a null value")
            out.append(_tostr(value))
        return "".join(out)
    if kind == "var":
        name = args[0]
        if name in scope.bindings:
            return scope.bindings[name]
        raise Unsupported(f"bare name {name!r}")
    if kind in ("attr", "index", "splat"):
        return _traverse(node, scope)
    if kind == "call":
        return _call(args[0], [], scope, args[1])
    if kind == "cond":
        cond = evaluate(args[0], scope)
        if cond is UNKNOWN:
            return UNKNOWN
        if cond is None:
            raise EvalError("null condition")
        return evaluate(args[1] if _tobool(cond) else args[2], scope)
    if kind == "unop":
        value = evaluate(args[1], scope)
        if value is UNKNOWN:
            return UNKNOWN
        return (not _tobool(value)) if args[0] == "!" else -_tonum(value)
    if kind == "binop":
        op, left, right = args
        a, b = evaluate(left, scope), evaluate(right, scope)  # HCL evaluates both sides
        if not _known(a, b):
            return UNKNOWN
        if op == "==":
            return _equal(a, b)
        if op == "!=":
            return not _equal(a, b)
        if op in ("&&", "||"):
            return (_tobool(a) and _tobool(b)) if op == "&&" else (_tobool(a) or _tobool(b))
        x, y = _tonum(a), _tonum(b)
        return {
            "<": lambda: x < y,
            ">": lambda: x > y,
            "<=": lambda: x <= y,
            ">=": lambda: x >= y,
            "+": lambda: x + y,
            "-": lambda: x - y,
            "*": lambda: x * y,
            "/": lambda: x / y,
            "%": lambda: x % y,
        }[op]()
    if kind == "tuple":
        return [evaluate(a, scope) for a in args]
    if kind == "object":
        return {_tostr(evaluate(k, scope)): evaluate(v, scope) for k, v in args}
    if kind == "for":
        key_var, val_var, coll_node, key_expr, value_expr, cond = args
        coll = evaluate(coll_node, scope)
        if coll is UNKNOWN:
            return UNKNOWN
        items = sorted(coll.items()) if isinstance(coll, dict) else list(enumerate(coll))
        result: Any = {} if key_expr is not None else []
        for k, v in items:
            inner = scope.child(**({key_var: k} if key_var else {}), **{val_var: v})
            if cond is not None:
                keep = evaluate(cond, inner)
                if keep is UNKNOWN:
                    return UNKNOWN
                if not _tobool(keep):
                    continue
            if key_expr is not None:
                key = _tostr(evaluate(key_expr, inner))
                if key in result:
                    raise EvalError(f"duplicate key {key!r} in for expression")
                result[key] = evaluate(value_expr, inner)
            else:
                result.append(evaluate(value_expr, inner))
        return result
    raise Unsupported(kind)


def _traverse(node: Node, scope: Scope) -> Any:
    steps: list = []
    n = node
    while n.kind in ("attr", "index", "splat"):
        steps.append(n)
        n = n.args[0]
    steps.reverse()
    if n.kind != "var":
        value = evaluate(n, scope)
        return _apply(value, steps, scope)
    root = n.args[0]
    if root in scope.bindings:
        return _apply(scope.bindings[root], steps, scope)
    if root == "var":
        name = _step_name(steps[0])
        if name not in scope.variables:
            raise EvalError(f"var.{name} is not declared")
        return _apply(scope.variables[name], steps[1:], scope)
    if root == "local":
        return _apply(scope.local(_step_name(steps[0])), steps[1:], scope)
    if root == "path" and _step_name(steps[0]) in ("module", "root") and scope.module_dir is not None:
        return _apply(str(scope.module_dir), steps[1:], scope)
    if scope.resolve is not None:
        accessors = [
            ("attr", s.args[1])
            if s.kind == "attr"
            else ("index", evaluate(s.args[1], scope))
            if s.kind == "index"
            else ("splat",)
            for s in steps
        ]
        return scope.resolve(root, accessors)
    raise Unsupported(f"reference {root}.…")


def _step_name(step: Node) -> str:
    if step.kind != "attr":
        raise EvalError("expected an attribute name")
    return step.args[1]


def _apply(value: Any, steps: list, scope: Scope) -> Any:
    for pos, step in enumerate(steps):
        if step.kind == "attr":
            value = _attr(value, step.args[1])
        elif step.kind == "index":
            value = _index(value, evaluate(step.args[1], scope))
        else:
            if value is UNKNOWN:
                return UNKNOWN
            items = [] if value is None else (value if isinstance(value, list) else [value])
            return [_apply(item, steps[pos + 1 :], scope) for item in items]
    return value
