"""Parse nfdump filter text into the syntax tree of `ast.py` (lark, LALR(1); the pre-built
stand-alone parser of standalone.py when present: no lark import at a query's start).

Errors are `FilterError`s that show the filter with a caret under the offending
token, as nfdump's "syntax error at 'x'" does, but pointing at it.
"""
from __future__ import annotations

import ipaddress
import re
from functools import lru_cache
from pathlib import Path

from . import ast

GRAMMAR = Path(__file__).with_name("grammar.lark").read_text()


def _standalone():
    """The pre-built parser module (standalone.py, built by `make setup`) when it was built
    from this grammar, else None (lark then builds the parser, cached)."""
    try:
        from . import _filter_lalr as mod  # noqa: PLC0415  (optional: built by make setup)
    except ImportError:
        return None
    return mod if getattr(mod, "GRAMMAR", None) == GRAMMAR else None


_STANDALONE = _standalone()
if _STANDALONE is not None:  # the same classes, from the module's copy of lark's runtime
    Token, Transformer, v_args = _STANDALONE.Token, _STANDALONE.Transformer, _STANDALONE.v_args
    LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError = (
        _STANDALONE.LarkError, _STANDALONE.UnexpectedCharacters, _STANDALONE.UnexpectedEOF,
        _STANDALONE.UnexpectedInput, _STANDALONE.UnexpectedToken, _STANDALONE.VisitError)
else:
    from lark import Token, Transformer, v_args
    from lark.exceptions import (
        LarkError,
        UnexpectedCharacters,
        UnexpectedEOF,
        UnexpectedInput,
        UnexpectedToken,
        VisitError,
    )

# nfdump's symbolic protocol names (a subset of its table; numbers always work).
PROTOCOLS = {
    "icmp": 1, "igmp": 2, "ggp": 3, "ipip": 4, "st": 5, "tcp": 6, "cbt": 7, "egp": 8, "igp": 9,
    "pup": 12, "udp": 17, "idp": 22, "rdp": 27, "ipv6": 41, "rsvp": 46, "gre": 47, "esp": 50,
    "ah": 51, "icmp6": 58, "eigrp": 88, "ospf": 89, "pim": 103, "vrrp": 112, "l2tp": 115,
    "sctp": 132,
}
FLAG_BITS = {"F": 1, "S": 2, "R": 4, "P": 8, "A": 16, "U": 32, "E": 64, "C": 128, "X": 63}
SCALE = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}  # nfdump scales by 1000 (bytes 1k == bytes 1000)
COMP = {"=": "==", "==": "==", "eq": "==", "<": "<", "lt": "<", ">": ">", "gt": ">",
        "<=": "<=", "le": "<=", ">=": ">=", "ge": ">="}
# nfdump's numbers: decimal with an optional scale, or hex (0x1122, no scale), wherever a number goes
NUMBER = re.compile(r"^(?:0x([0-9a-f]+)|(\d+)([kmgt]?))$", re.I)
MPLS_MAX = 0xFFFFFF  # nfdump 1.7.1's MPLSMAX; a label compares as its low 20 bits
# nfdump 1.7.1's forwarding status names (grammar.y fwd_status_def_list): `fwdstat NAME`
FWD_STATUS = {"ukwn": 0, "forw": 1, "frag": 2, "drop": 16, "dacld": 17, "daclp": 18, "noroute": 19, "dadj": 20,
              "dfrag": 21, "dbadh": 22, "dbadtlen": 23, "dbadhlen": 24, "dbadttl": 25, "dpolicy": 26, "dwred": 27,
              "drpf": 28, "dforus": 29, "dbadof": 30, "dhw": 31, "term": 128, "tadj": 129, "tincadj": 130,
              "tforus": 131}
NAT_EVENTS = {"invalid": 0, "add": 1, "create": 1, "delete": 2}  # nfdump 1.7.1: `nat event add` ...
MAC = re.compile(r"^[0-9a-f:]{1,17}$", re.I)
MAX_VALUE = 2**63 - 1


class FilterError(ValueError):
    """An invalid filter; str() shows the filter with a caret under the bad token."""

    def __init__(self, message: str, text: str, pos: int | None = None, length: int = 1):
        self.message, self.text, self.pos, self.length = message, text, pos, max(1, length)
        super().__init__(self._render())

    def _render(self) -> str:
        if self.pos is None:
            return f"invalid filter: {self.message}"
        start = self.text.rfind("\n", 0, self.pos) + 1
        end = self.text.find("\n", self.pos)
        line = self.text[start:] if end < 0 else self.text[start:end]
        lineno = self.text.count("\n", 0, self.pos) + 1
        col = self.pos - start
        where = f"line {lineno}, column {col + 1}"
        return (f"invalid filter ({where}): {self.message}\n  {line}\n  "
                + " " * col + "^" * min(self.length, max(1, len(line) - col)))


class _Bad(Exception):
    def __init__(self, message: str, token: Token):
        self.message, self.token = message, token


@lru_cache(maxsize=1)
def _lark():
    if _STANDALONE is not None:
        return _STANDALONE.Lark_StandAlone()
    from lark import Lark  # noqa: PLC0415  (start-up: lark)

    from .standalone import OPTIONS  # noqa: PLC0415  (start-up: flowlake status)

    return Lark(GRAMMAR, **OPTIONS, cache=_cache_file(GRAMMAR))


def _cache_file(grammar: str) -> str | bool:
    """Lark's analysed grammar, when the pre-built module is missing, kept in the user's
    own cache folder: building the LALR tables costs more than DuckDB's whole scan of a
    day. (Lark's default cache file lives in the shared /tmp, and it is a pickle.) False,
    no cache, if the folder is unusable."""
    import hashlib  # noqa: PLC0415  (start-up: flowlake query's fast path)

    from lark import __version__ as lark_version  # noqa: PLC0415  (start-up: lark)

    from flowlake.base import parsed_cache  # noqa: PLC0415  (start-up: flowlake query's fast path)

    base = parsed_cache.folder()
    if base is None:
        return False
    digest = hashlib.sha256((grammar + lark_version).encode()).hexdigest()[:16]
    return str(base / f"filter-grammar-{digest}.lark")


def _is_number(text: str) -> bool:
    return NUMBER.match(text) is not None


def _number(tok: Token, what: str, limit: int = MAX_VALUE) -> int:
    m = NUMBER.match(str(tok))
    if not m:
        raise _Bad(f"expected {what}, got '{tok}'", tok)
    value = int(m.group(1), 16) if m.group(1) else int(m.group(2)) * SCALE[m.group(3).lower()]
    if value > limit:
        raise _Bad(f"{what} {value} is out of range (max {limit})", tok)
    return value


def _address(tok: Token) -> ipaddress._BaseNetwork:
    try:
        return ipaddress.ip_network(ipaddress.ip_address(str(tok)))
    except ValueError:
        raise _Bad(f"'{tok}' is not an IPv4 or IPv6 address", tok) from None


def _network(tok: Token, mask: Token | None = None) -> ipaddress._BaseNetwork:
    text = str(tok)
    if mask is not None:
        text = f"{text}/{mask}"
    addr, slash, bits = text.partition("/")
    if slash and bits.lower().startswith("0x") and _is_number(bits):  # nfdump reads the prefix length as a number
        text = f"{addr}/{int(bits, 16)}"
    if "/" not in text:
        raise _Bad(f"'{tok}' needs a prefix length (net 10.0.0.0/8) or a mask (net 10.0.0.0 255.0.0.0)", tok)
    try:
        # strict=False: nfdump applies the mask to the given address.
        return ipaddress.ip_network(text, strict=False)
    except ValueError as exc:
        raise _Bad(f"'{text}' is not a network: {exc}", mask or tok) from None


def _split(args):
    """Separate the optional leading direction/comparator tokens from the rest."""
    return {t.type: t for t in args if isinstance(t, Token)}, [a for a in args if not isinstance(a, Token)]


def _sided(toks, src: str, dst: str, make):
    """The node for the field(s) the direction qualifier names: src, dst, either (no
    qualifier or `src or dst`), both (`src and dst`), as nfdump's dqual."""
    d = toks.get("DIR")
    side = "src or dst" if d is None else str(d)
    if side in ("src", "dst"):
        return make(src if side == "src" else dst)
    nodes = (make(src), make(dst))
    return ast.Or(nodes) if side == "src or dst" else ast.And(nodes)


@v_args(inline=True)
class _ToAst(Transformer):
    def or_expr(self, *items):
        return ast.Or(tuple(i for i in items if not isinstance(i, Token)))

    def and_expr(self, *items):
        return ast.And(tuple(i for i in items if not isinstance(i, Token)))

    def not_(self, _tok, item):
        return ast.Not(item)

    def any_(self, _tok):
        return ast.Any_()

    def family(self, tok):
        return ast.Family(6 if "6" in tok else 4)

    def vlist(self, *values):
        return list(values)

    def dqual(self, *toks):
        """One DIR token: 'src', 'dst', 'src or dst' (either side) or 'src and dst' (both sides)."""
        sides = [str(t).lower() for t in toks if t.type == "DIR"]
        if len(sides) == 1:
            return Token.new_borrow_pos("DIR", sides[0], toks[0])
        if sides[0] == sides[1]:
            raise _Bad(f"'{toks[0]} {toks[1]} {toks[2]}' names one side twice (src or dst, src and dst)", toks[2])
        # the value spans the words, so an error's caret underlines all three
        return Token.new_borrow_pos("DIR", f"src {toks[1].type.lower()} dst", toks[0])

    def ip(self, *args):
        toks = {t.type: t for t in args}
        net = _address(args[-1])
        return _sided(toks, "src_addr", "dst_addr", lambda f: ast.Addr(f, (net,)))

    def ip_in(self, *args):
        toks, (values,) = _split(args)
        if not values:
            raise _Bad("empty address list", toks["IN"])
        nets = tuple(_network(v) if "/" in v else _address(v) for v in values)
        return _sided(toks, "src_addr", "dst_addr", lambda f: ast.Addr(f, nets))

    def net(self, *args):
        vals = [a for a in args if a.type == "VALUE"]
        toks = {t.type: t for t in args if t.type != "VALUE"}
        net = _network(*vals)
        return _sided(toks, "src_addr", "dst_addr", lambda f: ast.Addr(f, (net,)))

    def _cmp(self, args, src, dst, what, limit):
        toks = {t.type: t for t in args if t.type != "VALUE"}
        value = _number(args[-1], what, limit)
        op = COMP[toks["COMP"].lower()] if "COMP" in toks else "=="
        return _sided(toks, src, dst, lambda f: ast.Cmp(f, op, value))

    def _in(self, args, src, dst, what, limit):
        toks, (values,) = _split(args)
        if not values:
            raise _Bad(f"empty {what} list", toks["IN"])
        nums = tuple(sorted({_number(v, what, limit) for v in values}))
        return _sided(toks, src, dst, lambda f: ast.In(f, nums))

    def port(self, *args):
        return self._cmp(args, "src_port", "dst_port", "a port number", 65535)

    def port_in(self, *args):
        return self._in(args, "src_port", "dst_port", "a port number", 65535)

    def as_(self, *args):
        return self._cmp(args, "src_as", "dst_as", "an AS number", 2**32 - 1)

    def as_in(self, *args):
        return self._in(args, "src_as", "dst_as", "an AS number", 2**32 - 1)

    def proto(self, _kw, tok):
        name = str(tok).lower()
        if _is_number(name):
            return ast.Cmp("proto", "==", _number(tok, "a protocol number", 255))
        if name not in PROTOCOLS:
            raise _Bad(f"unknown protocol '{tok}' (use a number or one of {', '.join(sorted(PROTOCOLS))})", tok)
        return ast.Cmp("proto", "==", PROTOCOLS[name])

    def flags(self, _kw, tok):
        text = str(tok).upper()
        if _is_number(text):  # nfdump 1.7.1: `flags 7` is `flags = 7` (a number compares, letters test bits)
            return self._flags_cmp("==", tok)
        bad = [c for c in text if c not in FLAG_BITS]
        if bad:
            raise _Bad(f"unknown TCP flag '{bad[0]}' in '{tok}' (use letters of {''.join(FLAG_BITS)})", tok)
        mask = 0
        for c in text:
            mask |= FLAG_BITS[c]
        return ast.Flags(mask)

    def flags_cmp(self, _kw, comp, tok):
        return self._flags_cmp(COMP[comp.lower()], tok)

    @staticmethod
    def _flags_cmp(op, tok):
        # nfdump 1.7.1: 0..63, TCP implied (`flags > 6` is "TCP and flags > 6")
        return ast.And((ast.Cmp("proto", "==", 6), ast.Cmp("tcp_flags", op, _number(tok, "a flags value", 63))))

    def tos(self, *args):
        toks = {t.type: t for t in args if t.type != "VALUE"}
        d = toks.get("DIR")
        if d is not None and str(d) != "src":
            # nfdump's dst tos is IPFIX postIpClassOfService (55): the lake keeps only the source ToS
            raise _Bad("the lake keeps no destination ToS (IPFIX postIpClassOfService, 55): "
                       "`tos` and `src tos` compare the source ToS", d)
        comp = toks.get("COMP")
        return ast.Cmp("tos", COMP[comp.lower()] if comp is not None else "==", _number(args[-1], "a ToS value", 255))

    def iface(self, *args):
        toks = {t.type: t for t in args}
        value = _number(args[-1], "an interface number", 2**32 - 1)
        d = toks.get("IFDIR")
        fields = ("input_if", "output_if") if d is None else (("input_if",) if d.lower() == "in" else ("output_if",))
        return ast.either(fields, lambda f: ast.Cmp(f, "==", value))

    def vlan(self, *args):
        # nfdump 1.7.1: equality only (`vlan > 5` is its syntax error), 0..65535; no side = either
        toks = {t.type: t for t in args if t.type != "VALUE"}
        value = _number(args[-1], "a VLAN number", 65535)
        return _sided(toks, "src_vlan", "dst_vlan", lambda f: ast.Cmp(f, "==", value))

    def router(self, _kw, _ip, tok):
        return ast.Addr("exporter", (_address(tok),))

    # ---- Flow record revision 3 (issue 32): nfdump 1.7.1's spellings --------------------
    def next_ip(self, _kw, _ip, tok):
        return ast.Addr("next_hop", (_address(tok),))

    def next_ip_in(self, *args):
        toks, (values,) = _split(args)
        if not values:
            raise _Bad("empty address list", toks["IN"])
        return ast.Addr("next_hop", tuple(_network(v) if "/" in v else _address(v) for v in values))

    def bgpnext_ip(self, _kw, _ip, tok):
        return ast.Addr("bgp_next_hop", (_address(tok),))

    def mask(self, *args):
        toks = {t.type: t for t in args if t.type != "VALUE"}
        value = _number(args[-1], "a mask length", 255)
        return _sided(toks, "src_mask", "dst_mask", lambda f: ast.Cmp(f, "==", value))

    def mac(self, *args):
        # The lake keeps one MAC a side (src_mac: the ingress source MAC, else the egress one;
        # dst_mac: the ingress destination MAC, else the egress one): nfdump's `in`/`out`
        # qualifiers pick nfdump's in/out MAC fields, here only the side (src/dst) counts.
        toks = {t.type: t for t in args if t.type != "VALUE"}
        if "DIR" in toks and str(toks["DIR"]) not in ("src", "dst"):  # nfdump: "not expected here"
            raise _Bad("a MAC filter takes src or dst, not both", toks["DIR"])
        tok = args[-1]
        text = str(tok)
        octets = text.split(":")
        if not MAC.match(text) or len(octets) != 6 or not all(1 <= len(o) <= 2 for o in octets):
            raise _Bad(f"'{tok}' is not a MAC address (six hex octets: 00:11:22:aa:bb:cc)", tok)
        if all(int(o, 16) == 0 for o in octets):  # nfdump 1.7.1 refuses it (its "no MAC")
            raise _Bad(f"'{tok}' is the null MAC address: it cannot be matched", tok)
        value = ":".join(f"{int(o, 16):02x}" for o in octets)
        return _sided(toks, "src_mac", "dst_mac", lambda f: ast.Text(f, (value,)))

    def mpls(self, _kw, what, *args):
        comp = [t for t in args if t.type == "COMP"]
        op = COMP[comp[0].lower()] if comp else "=="
        name = str(what).lower()
        value = _number(args[-1], "an MPLS label", MPLS_MAX)
        if name == "eos":  # the bottom of the stack's label (the lake's stack ends there)
            return ast.Cmp("mpls_eos", op, value)
        m = re.fullmatch(r"(label|exp)(\d*)", name)
        if m is None:
            raise _Bad(f"unknown MPLS option '{what}' (use label1..label10, eos or any)", what)
        if not m.group(2):
            raise _Bad(f"'{what}' needs a label number 1..10 (mpls {m.group(1)}1 ... {m.group(1)}10)", what)
        n = int(m.group(2))
        if not 1 <= n <= 10:
            raise _Bad(f"MPLS label {n} is out of range 1..10", what)
        if m.group(1) == "exp":
            raise _Bad(f"'mpls {what}': the lake keeps MPLS label values only, not their EXP bits", what)
        return ast.Cmp(f"mpls_label{n}", op, value & 0xFFFFF)  # nfdump compares the 20 label bits

    def mpls_any(self, _kw, _any, tok):
        return ast.ListHas("mpls_labels", _number(tok, "an MPLS label", MPLS_MAX))

    def aspath(self, *args):
        # flowlake's extension (nfdump 1.7.1 has no AS path): the AS number anywhere in the
        # path of the route to the destination (dst_as_path); the lake keeps no path towards
        # the source, so `src aspath` is refused rather than read as something else
        toks = {t.type: t for t in args if t.type != "VALUE"}
        d = toks.get("DIR")
        if d is not None and str(d) != "dst":
            raise _Bad("the lake keeps the AS path towards the destination only (dst_as_path): use "
                       "`dst aspath N` (or `aspath N`); `src as N` compares the source's AS", d)
        return ast.ListHas("dst_as_path", _number(args[-1], "an AS number", 2**32 - 1))

    def community(self, _kw, tok):
        # flowlake's extension: a standard community A:B (RFC 1997, each 0..65535) in
        # dst_communities, or a large community A:B:C (RFC 8092, each 0..4294967295) in
        # dst_large_communities; numbers are compared in their decimal text form
        parts = str(tok).split(":")
        if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
            raise _Bad(f"'{tok}' is not a community: expected A:B (standard) or A:B:C (large), decimal numbers",
                       tok)
        limit = 65535 if len(parts) == 2 else 2**32 - 1
        if any(int(p) > limit for p in parts):
            raise _Bad(f"community '{tok}': each part of a {'standard' if len(parts) == 2 else 'large'} "
                       f"community is 0..{limit}", tok)
        text = ":".join(str(int(p)) for p in parts)
        return ast.ListHas("dst_communities" if len(parts) == 2 else "dst_large_communities", text)

    def nip(self, *args):
        toks = {t.type: t for t in args if t.type != "VALUE"}
        net = _address(args[-1])
        return _sided(toks, "src_addr_nat", "dst_addr_nat", lambda f: ast.Addr(f, (net,)))

    def nip_in(self, *args):
        toks, (values,) = _split(args)
        if not values:
            raise _Bad("empty address list", toks["IN"])
        nets = tuple(_network(v) if "/" in v else _address(v) for v in values)
        return _sided(toks, "src_addr_nat", "dst_addr_nat", lambda f: ast.Addr(f, nets))

    def xnet(self, *args):
        toks = {t.type: t for t in args if t.type != "VALUE"}
        net = _network(args[-1])
        return _sided(toks, "src_addr_nat", "dst_addr_nat", lambda f: ast.Addr(f, (net,)))

    def nport(self, *args):
        return self._cmp(args, "src_port_nat", "dst_port_nat", "a port number", 65535)

    def nat_event(self, _nat, _event, *args):
        comp = [t for t in args if t.type == "COMP"]
        tok = args[-1]
        name = str(tok).lower()
        if name in NAT_EVENTS:
            if comp:
                raise _Bad(f"a NAT event name compares by equality only ('nat event {tok}'); "
                           f"compare numbers: 'nat event {comp[0]} {NAT_EVENTS[name]}'", tok)
            return ast.Cmp("nat_event", "==", NAT_EVENTS[name])
        if not _is_number(name):
            raise _Bad(f"unknown NAT event '{tok}' (use a number or one of {', '.join(NAT_EVENTS)})", tok)
        return ast.Cmp("nat_event", COMP[comp[0].lower()] if comp else "==", _number(tok, "a NAT event", 255))

    def icmp_type(self, _kw, tok):  # nfdump: equality only, ICMP or ICMPv6 implied
        return ast.And((ast.In("proto", (1, 58)), ast.Cmp("icmp_type", "==", _number(tok, "an ICMP type", 255))))

    def icmp_code(self, _kw, tok):
        return ast.And((ast.In("proto", (1, 58)), ast.Cmp("icmp_code", "==", _number(tok, "an ICMP code", 255))))

    def flowdir(self, _kw, tok):
        name = str(tok).lower()
        if name in ("ingress", "egress"):
            return ast.Cmp("flow_direction", "==", 0 if name == "ingress" else 1)
        if not _is_number(name):
            raise _Bad(f"unknown flow direction '{tok}' (use ingress, egress, 0 or 1)", tok)
        return ast.Cmp("flow_direction", "==", _number(tok, "a flow direction", 255))

    def fwdstat(self, _kw, tok):
        name = str(tok).lower()
        if _is_number(name):
            return ast.Cmp("forwarding_status", "==", _number(tok, "a forwarding status", 255))
        if name not in FWD_STATUS:
            raise _Bad(f"unknown forwarding status '{tok}' (use 0..255 or one of nfdump's names: "
                       f"{', '.join(sorted(FWD_STATUS))})", tok)
        return ast.Cmp("forwarding_status", "==", FWD_STATUS[name])

    def vrf(self, side, _vrf, *args):
        comp = [t for t in args if t.type == "COMP"]
        field = "ingress_vrf" if side.type == "INGRESS" else "egress_vrf"
        return ast.Cmp(field, COMP[comp[0].lower()] if comp else "==", _number(args[-1], "a VRF id", 2**32 - 1))

    def adjacent_as(self, side, *_rest):
        raise _Bad(f"the lake keeps no BGP adjacent AS ({side} as: IPFIX bgpPrevAdjacentAS 128 / "
                   "bgpNextAdjacentAS 129); `src as`/`dst as` compare the flow's AS numbers", side)

    def counter(self, *args):
        if args[0].type == "CNTDIR":
            if args[0].lower() == "out":  # nfdump: a biflow's reverse counters
                raise _Bad(f"'out {args[1]}': the lake keeps no reverse counters on a row: a biflow lands as two "
                           "one-way rows (biflow_half 1 and 2), each counted by bytes/packets", args[0])
            args = args[1:]  # nfdump: `in bytes` is `bytes`
        name = args[0].lower()
        comp = [t for t in args[1:] if t.type == "COMP"]
        op = COMP[comp[0].lower()] if comp else "=="
        return ast.Cmp(name, op, _number(args[-1], f"a number for {name}", MAX_VALUE))


def parse(text: str):
    """Filter text -> syntax tree. Raises FilterError naming and pointing at the bad token."""
    if not isinstance(text, str):
        raise FilterError("the filter must be text", str(text))
    if not text.strip() or not re.sub(r"#[^\n]*", "", text).strip():
        return ast.Any_()
    try:
        tree = _lark().parse(text)
        return _ToAst().transform(tree)
    except VisitError as exc:
        inner = exc.orig_exc
        if isinstance(inner, _Bad):
            tok = inner.token
            raise FilterError(inner.message, text, tok.start_pos, len(str(tok))) from None
        raise FilterError(f"internal error on this filter: {inner!r}", text) from None
    except UnexpectedEOF:
        raise FilterError("the filter ends too early", text, len(text.rstrip())) from None
    except UnexpectedToken as exc:
        tok = exc.token
        if tok.type == "$END":
            raise FilterError("the filter ends too early", text, len(text.rstrip())) from None
        expected = _describe(exc.expected)
        raise FilterError(f"syntax error at '{tok}'" + (f": expected {expected}" if expected else ""),
                          text, tok.start_pos, len(str(tok))) from None
    except UnexpectedCharacters as exc:
        raise FilterError(f"syntax error at '{text[exc.pos_in_stream]}'", text, exc.pos_in_stream) from None
    except (UnexpectedInput, LarkError) as exc:  # anything else lark may raise
        raise FilterError(f"syntax error: {exc.__class__.__name__}", text, getattr(exc, "pos_in_stream", None)) from None


_NAMES = {"VALUE": "a value", "COMP": "a comparison", "LPAR": "'('", "RPAR": "')'", "LSQB": "'['",
          "RSQB": "']'", "AND": "'and'", "OR": "'or'", "IN": "'in'", "$END": "the end of the filter"}


def _describe(expected) -> str:
    names = sorted({_NAMES.get(e, e.lower()) for e in expected if not e.startswith("__")})
    if not names or len(names) > 6:
        return "a filter primitive (ip, net, port, proto, flags, as, if, bytes, packets, ...)" if len(names) > 6 else ""
    return " or ".join(names)
