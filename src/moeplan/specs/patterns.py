"""Module-name patterns of quantization ignore / target lists, matched in linear time.

Checkpoints list the modules a quantization method leaves out (``modules_to_not_convert``,
``ignore``, ``exclude_modules``) — GLM-5-FP8 lists 712. Python's backtracking ``re`` can take
exponential time on patterns such as ``(.|.)*Z``, so nothing here calls it on a pattern:

- :class:`Regex`: a Thompson NFA (each pattern compiled once) for the regular-expression
  subset the configs use — literals, ``.``, ``\\d \\w \\s`` and escaped characters, classes
  ``[a-z_]`` / ``[^.]``, groups ``(...)`` / ``(?:...)``, ``|``, ``* + ?``, ``{m}`` / ``{m,n}``
  (n <= :data:`MAX_REPEAT`), ``^`` at the start and ``$`` at the end. A match simulates
  every NFA state at once: time ``O(len(name) x len(pattern))``, never more. Anything else
  (back-references, look-arounds) is one error line.
- :func:`glob_match`: shell globs (``*`` any run, ``?`` one character), greedy two-pointer
  matching with one back-track point — ``O(len(name) x len(pattern))``.
"""

from __future__ import annotations

from moeplan.errors import MoeplanError, show

#: steps (characters matched, plus NFA states touched on a DFA miss) one pattern list may take
#: over a model's modules: ~2 s of Python at worst; real lists take < 0.2 M (Kimi-K2.5's
#: compressed-tensors list over its 670 linear modules: ~0.1 M)
MATCH_BUDGET = 5_000_000
MAX_REPEAT = 16
DFA_STATES = 50_000  # memoised DFA transitions kept per pattern (memory bound)  # {m,n} bounds unrolled into NFA states (configs use none)
_CLASSES = {
    "d": lambda ch: ch.isdigit(),
    "w": lambda ch: ch.isalnum() or ch == "_",
    "s": lambda ch: ch.isspace(),
}


class _Node:
    """An NFA state: ``test`` consumes one character (``None``: an epsilon split / end)."""

    __slots__ = ("test", "out")

    def __init__(self, test=None) -> None:  # type: ignore[no-untyped-def]
        self.test = test
        self.out: list[_Node] = []


class _Parser:
    def __init__(self, pattern: str, field: str) -> None:
        self.p, self.i, self.field = pattern, 0, field

    def fail(self, why: str) -> MoeplanError:
        return MoeplanError(f"{self.field} ({show(self.p)}) {why}")

    def peek(self) -> str:
        return self.p[self.i] if self.i < len(self.p) else ""

    # each fragment is (start, end) with end an epsilon node to link onward
    def alternation(self) -> tuple[_Node, _Node]:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        if len(branches) == 1:
            return branches[0]
        start, end = _Node(), _Node()
        for s, e in branches:
            start.out.append(s)
            e.out.append(end)
        return start, end

    def sequence(self) -> tuple[_Node, _Node]:
        start = end = _Node()
        while self.peek() not in ("", "|", ")"):
            s, e = self.repeat()
            end.out.append(s)
            end = e
        return start, end

    def repeat(self) -> tuple[_Node, _Node]:
        atom_at = self.i
        frag = self.atom()
        q = self.peek()
        if q not in ("*", "+", "?", "{"):
            return frag
        lo, hi = self.bounds()
        if self.peek() in ("?", "+"):
            raise self.fail("uses a lazy or possessive quantifier moeplan does not match")
        copies = [frag] + [
            self.reparse(atom_at) for _ in range(max(lo, 1 if hi else 0, (hi or lo)) - 1)
        ]
        start = end = _Node()
        for n, (s, e) in enumerate(copies):
            if n < lo:
                end.out.append(s)
                end = e
            else:  # optional copy (hi None: the last one loops)
                nxt = _Node()
                end.out.extend((s, nxt))
                e.out.append(nxt)
                if hi is None and n == len(copies) - 1:
                    e.out.append(s)
                end = nxt
        if hi is None and lo >= 1 and len(copies) == lo:  # x+ / x{m,}: loop on the last copy
            s, e = copies[-1]
            e.out.append(s)
        return start, end

    def reparse(self, at: int) -> tuple[_Node, _Node]:
        keep = self.i
        self.i = at
        frag = self.atom()
        self.i = keep
        return frag

    def bounds(self) -> tuple[int, int | None]:
        q = self.p[self.i]
        self.i += 1
        if q == "*":
            return 0, None
        if q == "+":
            return 1, None
        if q == "?":
            return 0, 1
        close = self.p.find("}", self.i)
        body = self.p[self.i : close] if close > 0 else ""
        parts = body.split(",")
        if close < 0 or len(parts) > 2 or not all(x.isdigit() or x == "" for x in parts) \
                or not parts[0]:  # fmt: skip
            raise self.fail("has a malformed {m,n} quantifier")
        self.i = close + 1
        lo = int(parts[0])
        hi = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
        if lo > MAX_REPEAT or (hi is not None and (hi > MAX_REPEAT or hi < lo)):
            raise self.fail(f"repeats more than {MAX_REPEAT} times")
        return lo, hi

    def atom(self) -> tuple[_Node, _Node]:
        ch = self.peek()
        if ch == "":
            raise self.fail("ends where an expression is expected")
        self.i += 1
        if ch == "(":
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                raise self.fail("uses a group kind (look-around, named) moeplan does not match")
            frag = self.alternation()
            if self.peek() != ")":
                raise self.fail("has an unclosed group")
            self.i += 1
            return frag
        if ch in "*+?{)":
            raise self.fail(f"has a quantifier {ch!r} with nothing to repeat")
        if ch == "[":
            return self.char(self.klass())
        if ch == ".":
            return self.char(lambda c: c != "\n")
        if ch == "\\":
            return self.char(self.escape())
        if ch in "^$":  # assertions: start / end of the name
            node, end = _Node("^" if ch == "^" else "$"), _Node()
            node.out.append(end)
            return node, end
        return self.char(lambda c, lit=ch: c == lit)

    def escape(self):  # type: ignore[no-untyped-def]
        e = self.peek()
        if e == "":
            raise self.fail("ends with a lone backslash")
        self.i += 1
        if e in _CLASSES:
            return _CLASSES[e]
        if e.isalnum():
            raise self.fail(f"uses an escape \\{e} moeplan does not match")
        return lambda c, lit=e: c == lit

    def klass(self):  # type: ignore[no-untyped-def]
        neg = self.peek() == "^"
        self.i += neg
        items: list = []
        first = True
        while True:
            ch = self.peek()
            if ch == "":
                raise self.fail("has an unclosed [class]")
            if ch == "]" and not first:
                self.i += 1
                break
            first = False
            self.i += 1
            if ch == "\\":
                items.append(self.escape())
            elif self.peek() == "-" and self.p[self.i + 1 : self.i + 2] not in ("]", ""):
                lo, hi = ch, self.p[self.i + 1]
                self.i += 2
                items.append(lambda c, lo=lo, hi=hi: lo <= c <= hi)
            else:
                items.append(lambda c, lit=ch: c == lit)
        return lambda c: any(t(c) for t in items) != neg

    @staticmethod
    def char(test) -> tuple[_Node, _Node]:  # type: ignore[no-untyped-def]
        node, end = _Node(test), _Node()
        node.out.append(end)
        return node, end


class Regex:
    """A pattern compiled once into an NFA; :meth:`match` is ``re.match`` (anchored at the
    start; the end anchored only by a final ``$``) in linear time."""

    def __init__(self, pattern: str, field: str) -> None:
        parser = _Parser(pattern, field)
        self.start, self.end = parser.alternation()
        if parser.i != len(pattern):
            raise parser.fail("has an unbalanced ')'")
        self._ids: dict[tuple[int, ...], int] = {}
        self._sets: list[tuple[_Node, ...]] = []
        self._done: list[bool] = []  # the state has reached the end (a prefix matched)
        self._final: dict[int, bool] = {}
        self._trans: dict[tuple[int, str], int] = {}
        self._dead = self._state(())
        self._start = self._state(self._closure([self.start], True, False))

    def _closure(self, nodes: list[_Node], first: bool, at_end: bool) -> tuple[_Node, ...]:
        """Consuming states, the end, and pending ``$`` assertions reachable by epsilon moves;
        ``^`` passes only before the first character, ``$`` only when ``at_end``."""
        seen: set[int] = set()
        out, stack = [], list(nodes)
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            if n.test is None or (n.test == "^" and first) or (n.test == "$" and at_end):
                stack.extend(n.out)
            elif n.test != "^":
                out.append(n)  # a consuming state, or a "$" waiting for the end
            if n is self.end:
                out.append(n)
        return tuple(sorted(out, key=id))

    def _state(self, nodes: tuple[_Node, ...]) -> int:
        """The DFA state id of an NFA state set (interned)."""
        key = tuple(id(n) for n in nodes)
        sid = self._ids.get(key)
        if sid is None:
            sid = self._ids[key] = len(self._sets)
            self._sets.append(nodes)
            self._done.append(self.end in nodes)
        return sid

    def _accepts_at_end(self, sid: int) -> bool:
        hit = self._final.get(sid)
        if hit is None:
            nodes = [n for n in self._sets[sid] if n.test == "$" or n is self.end]
            hit = self._final[sid] = self.end in self._closure(nodes, False, True)
        return hit

    def _step(self, sid: int, ch: str, budget: list[int] | None) -> int:
        """The state after ``ch`` (memoised: a lazily built DFA; NFA work only on a miss)."""
        nxt = self._trans.get((sid, ch))
        if nxt is not None:
            return nxt
        nodes = self._sets[sid]
        if budget is not None:
            budget[0] -= len(nodes) + 1
            if budget[0] < 0:
                raise MoeplanError(f"matching module-name patterns exceeded moeplan's bound "
                                   f"of {MATCH_BUDGET} steps (too many or too complex "
                                   "patterns)")  # fmt: skip
        moved = [o for n in nodes if callable(n.test) and n.test(ch) for o in n.out]
        nxt = self._state(self._closure(moved, False, False))
        if len(self._trans) < DFA_STATES:
            self._trans[(sid, ch)] = nxt
        return nxt

    def match(self, name: str, budget: list[int] | None = None) -> bool:
        """``re.match(pattern, name)``; ``budget`` (a one-item list) is charged for the NFA
        work of every step not already memoised, and the match refused once it runs out."""
        if budget is not None:
            budget[0] -= len(name) + 1
            if budget[0] < 0:
                raise MoeplanError(f"matching module-name patterns exceeded moeplan's bound "
                                   f"of {MATCH_BUDGET} steps (too many or too complex "
                                   "patterns)")  # fmt: skip
        sid = self._start
        done, trans = self._done, self._trans
        for ch in name:
            if done[sid]:
                return True
            nxt = trans.get((sid, ch))
            sid = self._step(sid, ch, budget) if nxt is None else nxt
            if sid == self._dead:
                return False
        return done[sid] or self._accepts_at_end(sid)


def glob_match(name: str, pattern: str) -> bool:
    """Shell glob (``*`` any run, ``?`` one character; no classes) over the whole name."""
    n = p = 0
    star, mark = -1, 0
    while n < len(name):
        if p < len(pattern) and (pattern[p] == "?" or pattern[p] == name[n]):
            n, p = n + 1, p + 1
        elif p < len(pattern) and pattern[p] == "*":
            star, mark, p = p, n, p + 1
        elif star >= 0:
            p, mark = star + 1, mark + 1
            n = mark
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


_META = set("*+?[](){}|\\^$")


class PatternSet:
    """One ignore / target list, compiled once (``kind``: ``hf``, ``glob`` or ``ct``).

    - ``hf`` (``modules_to_not_convert``): a plain name excludes a module it equals, a parent
      module, or any run of whole dotted components of it (``lm_head``, ``mlp.gate``,
      ``model.layers.0``); a pattern with regular-expression syntax is matched from the start
      of the name up to a module boundary (``(?:p)(?:\\.|$)``, transformers'
      ``should_convert_module``).
    - ``glob`` (ModelOpt ``ignore`` / ``exclude_modules``): a shell glob matching the module
      or one of its parents.
    - ``ct`` (compressed-tensors): ``re:<regex>`` from the start of the name, ``Linear``
      (every linear module) or the exact name.
    """

    def __init__(self, patterns: tuple[str, ...], kind: str, field: str) -> None:
        self.kind, self.any_linear = kind, False
        self.exact: set[str] = set()
        self.prefixes: set[str] = set()
        self.globs: list[str] = []
        self.regexes: list[Regex] = []
        self.budget = [MATCH_BUDGET]
        if kind in ("glob", "ct"):  # plain names: one set update (ModelOpt lists ~100k)
            plain = {p for p in patterns if "*" not in p and "?" not in p}
            plain -= {p for p in plain if p.startswith("re:")} | {"Linear"}
            self.exact.update(plain)
            patterns = tuple(p for p in patterns if p not in plain)
        for p in patterns:
            self._add(p, field)

    def _add(self, p: str, field: str) -> None:
        if self.kind == "ct":
            if p.startswith("re:"):
                self.regexes.append(Regex(p[3:], field))
            elif p == "Linear":
                self.any_linear = True
            else:
                self.exact.add(p)
        elif self.kind == "glob":
            if "*" not in p and "?" not in p:
                self.exact.add(p)
            elif p.endswith("*") and "*" not in p[:-1] and "?" not in p:
                self.prefixes.add(p[:-1])
            else:
                self.globs.append(p)
        elif _META.isdisjoint(p):
            self.exact.add(p)
        else:
            self.regexes.append(Regex(f"(?:{p})(?:\\.|$)", field))

    def match(self, name: str) -> bool:
        if self.any_linear:
            return True
        if self.kind == "ct":
            return name in self.exact or any(r.match(name, self.budget) for r in self.regexes)
        parts = name.split(".")
        if self.kind == "glob":
            parents = {".".join(parts[:k]) for k in range(1, len(parts) + 1)}
            if not self.exact.isdisjoint(parents):
                return True
            if any(name[:k] in self.prefixes for k in range(len(name) + 1)):
                return True
            return any(glob_match(name, g) or glob_match(name, g + ".*") for g in self.globs)
        runs = {".".join(parts[i:j]) for i in range(len(parts))
                for j in range(i + 1, len(parts) + 1)}  # fmt: skip
        if not self.exact.isdisjoint(runs):
            return True
        return any(r.match(name, self.budget) for r in self.regexes)
