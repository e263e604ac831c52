"""Every way routers announce packet sampling, for the traffic model to export with truth.

A SamplingPlan gives a router its form, its samplers (id, rate) and optionally one rate
change at a model time. Flows are assigned to samplers by input interface; a flow's
rate is the one in force when the datagram carrying it is exported, which is what a
collector must apply (options announcing a change go out just before that datagram).

Forms (v9 field names / IPFIX information elements):
  v5-header            v5 header sampling_interval (mode 01, 14-bit interval); one sampler
  v9-34                options, scope System: SAMPLING_INTERVAL 34 + SAMPLING_ALGORITHM 35; one sampler
  v9-48-49-50          options: FLOW_SAMPLER_ID 48 + FLOW_SAMPLER_MODE 49 + FLOW_SAMPLER_RANDOM_INTERVAL 50;
                       data records carry 48
  v9-48-34             options: FLOW_SAMPLER_ID 48 + SAMPLING_INTERVAL 34; data records carry 48
                       (the one form nfcapd 1.7.1 applies, to its first sampler only)
  ipfix-149-305        options, scope observationDomainId 149: samplingPacketInterval 305 (= N) +
                       selectorAlgorithm 304; one sampler
  ipfix-302-305-306    options, scope selectorId 302: samplingPacketInterval 305 + samplingPacketSpace 306
  ipfix-302-309-310    options, scope selectorId 302: selectorAlgorithm 304 + samplingSize 309 +
                       samplingPopulation 310 (as the Cisco capture in tests/data/routers)
  ipfix-302-311        options, scope selectorId 302: samplingProbability 311 (float64)
  ipfix-48-34          options, scope samplerId 48: samplingInterval 34 + samplerMode 49
  ipfix-48-50          options, scope samplerId 48: samplerRandomInterval 50
  ipfix-data-34 | -305-306 | -309-310 | -311 | -50, v9-data-34
                       the rate in every data record (with the sampler id 302, or 48 for -50 and v9)
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

FORMS = ("v5-header", "v9-34", "v9-48-49-50", "v9-48-34", "ipfix-149-305", "ipfix-302-305-306",
         "ipfix-302-309-310", "ipfix-302-311", "ipfix-48-34", "ipfix-48-50", "ipfix-data-34",
         "ipfix-data-305-306", "ipfix-data-309-310", "ipfix-data-311", "ipfix-data-50", "v9-data-34")
SINGLE_SAMPLER = ("v5-header", "v9-34", "ipfix-149-305")


@dataclass
class Sampler:
    id: int
    rate: int


@dataclass
class SamplingPlan:
    form: str
    samplers: list = field(default_factory=lambda: [Sampler(1, 10)])
    change_at_ms: int | None = None   # model time of a rate change (None: no change)
    change_sampler: int = 0           # index into samplers
    change_rate: int = 0
    announce: bool = True             # False: options never sent (records name unknown samplers)

    def __post_init__(self):
        if self.form not in FORMS:
            raise ValueError(f"sampling form {self.form!r}: choose one of {', '.join(FORMS)}")
        if not self.samplers or any(s.rate < 1 for s in self.samplers):
            raise ValueError(f"sampling plan {self.form}: samplers need rates >= 1")
        if len(self.samplers) > 1 and self.form in SINGLE_SAMPLER:
            raise ValueError(f"sampling form {self.form} announces one rate per exporter, not {len(self.samplers)} samplers")

    @property
    def version(self) -> int:
        return 5 if self.form.startswith("v5") else 9 if self.form.startswith("v9") else 10

    @property
    def in_data(self) -> bool:
        return "-data-" in self.form

    def rates_at(self, export_ms: int) -> list[int]:
        rates = [s.rate for s in self.samplers]
        if self.change_at_ms is not None and export_ms >= self.change_at_ms:
            rates[self.change_sampler] = self.change_rate
        return rates

    def assign(self, f: np.ndarray) -> np.ndarray:
        """Sampler index per flow: by input interface (samplers sit on interfaces)."""
        return (f["in_if"].astype(np.int64) % len(self.samplers)).astype(np.int64)

    def flow_rates(self, idx: np.ndarray, export_ms: np.ndarray) -> np.ndarray:
        rates = np.array([s.rate for s in self.samplers], np.int64)[idx]
        if self.change_at_ms is not None:
            after = (export_ms >= self.change_at_ms) & (idx == self.change_sampler)
            rates[after] = self.change_rate
        return rates

    # --- wire encodings ----------------------------------------------------------------
    def data_fields(self) -> list[tuple[int, int]]:
        """Extra fields appended to the data templates (sampler id and/or rate)."""
        f = self.form
        if f in ("v9-48-49-50", "v9-48-34", "ipfix-48-34", "ipfix-48-50"):
            return [(48, 1)]
        if f.startswith("ipfix-302-"):
            return [(302, 4)]
        return {"ipfix-data-34": [(302, 4), (34, 4)], "ipfix-data-305-306": [(302, 4), (305, 4), (306, 4)],
                "ipfix-data-309-310": [(302, 4), (309, 4), (310, 4)], "ipfix-data-311": [(302, 4), (311, 8)],
                "ipfix-data-50": [(48, 1), (50, 4)], "v9-data-34": [(48, 1), (34, 4)]}.get(f, [])

    def data_values(self, idx: np.ndarray, rates: np.ndarray) -> np.ndarray:
        """Big-endian values of data_fields() for each flow."""
        cols = self.data_fields()
        dt = np.dtype([(f"f{ie}", {1: "u1", 4: ">u4", 8: ">f8" if ie == 311 else ">u8"}[ln]) for ie, ln in cols])
        out = np.zeros(len(idx), dt)
        ids = np.array([s.id for s in self.samplers], np.int64)[idx]
        for ie, _ in cols:
            out[f"f{ie}"] = {48: ids, 302: ids, 34: rates, 50: rates, 305: 1, 306: rates - 1, 309: 1,
                             310: rates, 311: 1.0 / rates.astype(np.float64)}[ie]
        return out

    def options(self, domain_id: int, export_ms: int, set_id: int) -> tuple[bytes, int]:
        """(options template set + options data set, number of records) announcing the
        rates in force at export_ms; b"" for v5 and data-record forms."""
        if self.version == 5 or self.in_data or not self.announce:
            return b"", 0
        rates = self.rates_at(export_ms)
        f = self.form
        v9 = self.version == 9
        per_sampler = {
            "v9-48-49-50": ([(48, 1), (49, 1), (50, 4)], lambda s, r: struct.pack(">BBI", s.id, 2, r)),
            "v9-48-34": ([(48, 1), (34, 4)], lambda s, r: struct.pack(">BI", s.id, r)),
            "ipfix-302-305-306": ([(302, 4), (305, 4), (306, 4)], lambda s, r: struct.pack(">III", s.id, 1, r - 1)),
            "ipfix-302-309-310": ([(302, 4), (304, 2), (309, 4), (310, 4)],
                                  lambda s, r: struct.pack(">IHII", s.id, 3, 1, r)),
            "ipfix-302-311": ([(302, 4), (311, 8)], lambda s, r: struct.pack(">Id", s.id, 1.0 / r)),
            "ipfix-48-34": ([(48, 1), (34, 4), (49, 1)], lambda s, r: struct.pack(">BIB", s.id, r, 2)),
            "ipfix-48-50": ([(48, 1), (50, 4)], lambda s, r: struct.pack(">BI", s.id, r)),
        }
        if f == "v9-34":
            fields, recs = [(34, 4), (35, 1)], [struct.pack(">IB", rates[0], 2)]
        elif f == "ipfix-149-305":
            fields, recs = [(149, 4), (305, 4), (304, 1)], [struct.pack(">IIB", domain_id, rates[0], 1)]
        else:
            fields, make = per_sampler[f]
            recs = [make(s, r) for s, r in zip(self.samplers, rates)]
        if v9:  # scope System (type 1, value the source id), lengths in bytes
            body = struct.pack(">HHH", OPTIONS_TEMPLATE, 4, 4 * len(fields)) + struct.pack(">HH", 1, 4) + \
                b"".join(struct.pack(">HH", *x) for x in fields)
            recs = [struct.pack(">I", domain_id) + r for r in recs]
            tmpl_set = 1
        else:  # the first field is the scope
            body = struct.pack(">HHH", OPTIONS_TEMPLATE, len(fields), 1) + b"".join(struct.pack(">HH", *x) for x in fields)
            tmpl_set = 3
        return _set(tmpl_set, body) + _set(OPTIONS_TEMPLATE, b"".join(recs)), 1 + len(recs)


OPTIONS_TEMPLATE = 258


def _set(set_id: int, body: bytes) -> bytes:
    pad = (-(len(body) + 4)) % 4
    return struct.pack(">HH", set_id, len(body) + 4 + pad) + body + b"\0" * pad


def plan_from_rate(version: int, rate: int) -> SamplingPlan | None:
    """The plan of a router given only `sampling_rate` (the model's defaults)."""
    if rate <= 1:
        return None
    form = {5: "v5-header", 9: "v9-34", 10: "ipfix-149-305"}[version]
    return SamplingPlan(form, [Sampler(1, rate)])
