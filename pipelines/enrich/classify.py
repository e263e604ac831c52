"""Interface classification, as Akvorado's interface classifiers: ordered rules in
`[[enrich.interface_rules]]` set an interface's boundary (external / internal),
connectivity (transit, peering, ix, customer, ...) and provider.

A rule matches when every regex it gives matches (re.search) its field: `exporter` (the
exporter's name), `name` (ifName), `description` (ifAlias); a rule with none matches
every known interface. It then sets `boundary`, `connectivity`, `provider` from its
literal values, or from the regex's named groups (?P<connectivity>...) / (?P<provider>...),
which win over literals. As in Akvorado, once a rule has set a criterion a later rule
cannot change it, and connectivity and provider are normalised (lower case, characters
other than letters, digits, '.', '-' and '_' removed). Interfaces nobody knows (no name,
no description) are not classified: unknown stays empty.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

MATCH_KEYS = ("exporter", "name", "description")
SET_KEYS = ("boundary", "connectivity", "provider")
GROUPS = ("connectivity", "provider")
BOUNDARIES = ("external", "internal")
_NORMALISE = re.compile(r"[^a-z0-9._-]+")


class RuleError(ValueError):
    """A rule is malformed; the message names it ([[enrich.interface_rules]] number and text)."""


@dataclass(frozen=True)
class Rule:
    number: int
    text: str
    match: tuple[tuple[str, re.Pattern], ...]
    values: dict


def normalise(value: str) -> str:
    return _NORMALISE.sub("", value.lower())


def parse_rules(raw: list) -> list[Rule]:
    """Compile the config's rules; RuleError names the first bad one (1-based, as written)."""
    if not isinstance(raw, list):
        raise RuleError(f"[enrich] interface_rules = {raw!r}: expected [[enrich.interface_rules]] tables")
    out = []
    for i, rule in enumerate(raw, start=1):
        where = f"[[enrich.interface_rules]] #{i} ({rule!r})"
        if not isinstance(rule, dict):
            raise RuleError(f"{where}: expected a table with keys {', '.join(MATCH_KEYS + SET_KEYS)}")
        unknown = sorted(set(rule) - set(MATCH_KEYS + SET_KEYS))
        if unknown:
            raise RuleError(f"{where}: unknown key(s) {', '.join(unknown)} (match on {', '.join(MATCH_KEYS)}; "
                            f"set {', '.join(SET_KEYS)})")
        match = []
        groups: set[str] = set()
        for key in MATCH_KEYS:
            if key not in rule:
                continue
            if not isinstance(rule[key], str):
                raise RuleError(f"{where}: {key} = {rule[key]!r}: expected a regex string")
            try:
                pattern = re.compile(rule[key])
            except re.error as exc:
                raise RuleError(f"{where}: {key} = {rule[key]!r} is not a valid regex: {exc}") from None
            bad = sorted(set(pattern.groupindex) - set(GROUPS))
            if bad:
                raise RuleError(f"{where}: {key}: named group(s) {', '.join(bad)} set nothing "
                                f"(named groups: {', '.join(GROUPS)})")
            groups |= set(pattern.groupindex)
            match.append((key, pattern))
        values = {}
        for key in SET_KEYS:
            if key not in rule:
                continue
            v = rule[key]
            if not isinstance(v, str) or not v:
                raise RuleError(f"{where}: {key} = {v!r}: expected a non-empty string")
            if key == "boundary" and v not in BOUNDARIES:
                raise RuleError(f"{where}: boundary = {v!r}: expected external or internal")
            values[key] = v if key == "boundary" else normalise(v)
        if not values and not groups:
            raise RuleError(f"{where}: sets nothing (give boundary, connectivity or provider, or a named group "
                            "(?P<provider>...) in a regex)")
        out.append(Rule(i, repr(rule), tuple(match), values))
    return out


def classify(rules: list[Rule], exporter: str, name: str, description: str) -> tuple[str, str, str]:
    """(boundary, connectivity, provider) of one interface; '' where no rule decided."""
    if not name and not description:
        return "", "", ""
    fields = {"exporter": exporter, "name": name, "description": description}
    got: dict[str, str] = {}
    for rule in rules:
        found = {}
        for key, pattern in rule.match:
            m = pattern.search(fields[key])
            if m is None:
                break
            found.update({g: v for g, v in m.groupdict().items() if v})
        else:
            for key in SET_KEYS:
                if key in got:
                    continue
                v = normalise(found[key]) if key in found else rule.values.get(key, "")
                if v:
                    got[key] = v
            if len(got) == len(SET_KEYS):
                break
    return got.get("boundary", ""), got.get("connectivity", ""), got.get("provider", "")
