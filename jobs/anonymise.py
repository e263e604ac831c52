"""Crypto-PAn address anonymisation, identical to nfdump's `nfanon` (1.7.1) with the same key.

IPv4 is the reference Crypto-PAn (Xu, Fan, Ammar, Moon 2002): prefix-preserving, one-to-one;
yacryptopan gives the same answers and is the test's second reference. IPv6 follows
nfanon's `anonymize_v6` exactly as it runs on x86-64, quirks included: it walks the
address as two host-order (little-endian) 64-bit words, takes one bit more of the
current byte than the reference and places the pad bit LSB-first. So IPv6 prefixes are
not preserved in network order and the map is not guaranteed one-to-one; IPv6 output
is only "the same pseudonym nfanon gives". (nfanon 1.7.1 also writes anon(anon(src))
as the IPv6 destination; flowlake anonymises each address itself instead.)

Each distinct address costs 32 (IPv4) or 128 (IPv6) AES blocks; they are built with
numpy and encrypted in one ECB call per chunk, so a day's distinct addresses take seconds.
"""
from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import os
from pathlib import Path
from typing import Callable, Iterable, Iterator

import click

from flowlake.base import config
from flowlake.schemas import FLOW

ENV_KEY = "FLOWLAKE_ANON_KEY"
# every address column of the flow record: src_addr, dst_addr and revision 3's next hops and
# NAT translation (MAC addresses are not IP addresses: Crypto-PAn leaves them as they are)
ADDRESS_COLUMNS = tuple(FLOW.address_fields("one"))
_CHUNK = 4096  # addresses per AES call: 8 MiB of IPv6 input blocks


class KeyError_(ValueError):
    """The key is not a 32-character string or 0x + 64 hex digits; the message says which input."""


def parse_key(text: str, where: str) -> bytes:
    """nfanon's key forms: a plain 32-character string, or 0x followed by 64 hex digits."""
    t = text.strip()
    if t.startswith(("0x", "0X")) and len(t) == 66:
        try:
            return bytes.fromhex(t[2:])
        except ValueError:
            pass
    elif len(t) == 32:
        return t.encode("latin-1")
    raise KeyError_(f"{where}: a Crypto-PAn key is 32 characters or 0x + 64 hex digits (as nfanon -K), "
                    f"got {len(t)} characters")


def load_key(key_file: str | Path | None) -> bytes:
    """The key from --key-file, else from $FLOWLAKE_ANON_KEY; a clear error if neither."""
    if key_file is not None:
        try:
            return parse_key(Path(key_file).read_text(encoding="latin-1"), str(key_file))
        except OSError as exc:
            raise KeyError_(f"{key_file}: cannot read the key: {exc.strerror}") from None
    if os.environ.get(ENV_KEY):
        return parse_key(os.environ[ENV_KEY], f"${ENV_KEY}")
    raise KeyError_(f"no anonymisation key: give --key-file FILE or set ${ENV_KEY}")


class CryptoPAn:
    def __init__(self, key: bytes):
        import numpy as np  # noqa: PLC0415  (start-up: numpy; `flowlake query` starts without it)
        from Cryptodome.Cipher import AES  # noqa: PLC0415  (start-up: pycryptodomex, installed with yacryptopan)

        if len(key) != 32:
            raise KeyError_(f"key: need 32 bytes, got {len(key)}")
        self._aes = AES.new(key[:16], AES.MODE_ECB)
        self._pad = np.frombuffer(self._aes.encrypt(key[16:]), np.uint8)  # as Crypto-PAn: E(second half)

    def _first_bits(self, blocks):
        import numpy as np  # noqa: PLC0415  (start-up: numpy)

        out = np.frombuffer(self._aes.encrypt(np.ascontiguousarray(blocks).tobytes()), np.uint8)
        return out.reshape(blocks.shape)[..., 0] >> 7

    def v4(self, addrs):
        """uint32 addresses -> anonymised uint32 (reference Crypto-PAn)."""
        import numpy as np  # noqa: PLC0415  (start-up: numpy)

        addrs = addrs.astype(np.uint64)
        pos = np.arange(32, dtype=np.uint64)
        pad32 = np.uint64(int.from_bytes(self._pad[:4].tobytes(), "big"))
        high = np.where(pos == 0, np.uint64(0), (np.uint64(0xFFFFFFFF) << (np.uint64(32) - pos)) & np.uint64(0xFFFFFFFF))
        first = (addrs[:, None] & high) | (pad32 & ~high & np.uint64(0xFFFFFFFF))  # (n, 32)
        blocks = np.empty((len(addrs), 32, 16), np.uint8)
        blocks[:] = self._pad
        for i in range(4):
            blocks[:, :, i] = (first >> np.uint64(24 - 8 * i)) & np.uint64(0xFF)
        bits = self._first_bits(blocks).astype(np.uint64)
        otp = (bits << (np.uint64(31) - pos)).sum(axis=1, dtype=np.uint64)
        return (otp ^ addrs).astype(np.uint32)

    def v6(self, addrs):
        """(n, 16) network-order bytes -> anonymised (n, 16), as nfanon's anonymize_v6 on x86-64."""
        import numpy as np  # noqa: PLC0415  (start-up: numpy)

        # nfdump keeps an IPv6 address as uint64[2] in host order: bytes reversed per 8-byte half
        orig = addrs.reshape(-1, 2, 8)[:, :, ::-1].reshape(-1, 16)
        pos = np.arange(128)
        left, bit = pos >> 3, pos & 7
        blocks = np.empty((len(orig), 128, 16), np.uint8)
        blocks[:] = self._pad
        keep = np.arange(16)[None, :] < left[:, None]  # bytes before the current one come from the address
        blocks = np.where(keep[None], orig[:, None, :], blocks)
        # the current byte: its top bit+1 bits (one more than the reference) OR the whole pad byte
        cur = ((orig[:, left].astype(np.int32) >> (7 - bit)) << (7 - bit)) | self._pad[left]
        blocks[:, pos, left] = cur.astype(np.uint8)
        bits = self._first_bits(blocks).astype(np.uint8)  # (n, 128)
        otp = (bits.reshape(-1, 16, 8) << np.arange(8, dtype=np.uint8)).sum(axis=2, dtype=np.uint8)
        return (otp ^ orig).reshape(-1, 2, 8)[:, :, ::-1].reshape(-1, 16)

    def strings(self, values: Iterable[str | None]) -> dict[str, str]:
        """Distinct address texts -> anonymised texts (None and non-addresses are left out)."""
        v4, v6 = [], []
        for v in set(values):
            if v is None:
                continue
            try:
                a = ipaddress.ip_address(v)
            except ValueError:
                continue
            (v4 if a.version == 4 else v6).append((v, a))
        import numpy as np  # noqa: PLC0415  (start-up: numpy)

        out: dict[str, str] = {}
        for i in range(0, len(v4), _CHUNK):
            part = v4[i:i + _CHUNK]
            anon = self.v4(np.array([int(a) for _, a in part], dtype=np.uint64))
            out.update((t, str(ipaddress.IPv4Address(int(x)))) for (t, _), x in zip(part, anon))
        for i in range(0, len(v6), _CHUNK):
            part = v6[i:i + _CHUNK]
            raw = np.frombuffer(b"".join(a.packed for _, a in part), np.uint8).reshape(-1, 16)
            anon = self.v6(raw)
            out.update((t, str(ipaddress.IPv6Address(row.tobytes()))) for (t, _), row in zip(part, anon))
        return out

    def one(self, address: str) -> str:
        return self.strings([address])[address]


def anonymise_table(table, cp: CryptoPAn, columns=ADDRESS_COLUMNS, list_columns=()):
    """pyarrow Table -> the same table (schema and order kept) with address columns anonymised;
    `list_columns` hold comma-separated addresses ("a,b,c"). Values that are not addresses stay."""
    import pyarrow as pa  # noqa: PLC0415  (start-up: pyarrow)

    for name in (*columns, *list_columns):
        if name not in table.column_names:
            continue
        values = table.column(name).to_pylist()
        if name in list_columns:
            mapping = cp.strings(a for v in values if v for a in v.split(","))
            new = [None if v is None else ",".join(mapping.get(a, a) for a in v.split(",")) for v in values]
        else:
            mapping = cp.strings(values)
            new = [mapping.get(v, v) if v is not None else None for v in values]
        col = pa.array(new, type=table.schema.field(name).type)
        table = table.set_column(table.schema.get_field_index(name), table.schema.field(name), col)
    return table


def anonymise_day(lake: Path, date: str, out: Path, cp: CryptoPAn) -> tuple[int, int]:
    """lake/flows/date=D/**.parquet -> out/flows/date=D/** (same relative paths, same schema).
    File by file, so memory stays bounded by the largest file. Returns (files, rows)."""
    import pyarrow.parquet as pq  # noqa: PLC0415  (start-up: pyarrow)

    from flowlake.pipelines.lake_read import lake_files  # noqa: PLC0415  (start-up: only this command)

    src = Path(lake) / "flows" / f"date={date}"
    files = [Path(f) for f in lake_files(lake, "flows", [src])[1]]  # a Delta table: its current version
    if not files:
        raise click.ClickException(f"no flows for {date} in the lake ({src} has no Parquet files)")
    rows = 0
    for f in files:
        target = Path(out) / "flows" / f.relative_to(Path(lake) / "flows")
        target.parent.mkdir(parents=True, exist_ok=True)
        table = anonymise_table(pq.ParquetFile(f).read(), cp)  # the file alone: no columns from its path
        tmp = target.with_name(target.name + ".tmp")
        pq.write_table(table, tmp, compression="zstd")
        tmp.replace(target)  # a reader never sees half a file
        rows += table.num_rows
    return len(files), rows


def rows_anonymiser(key: bytes | None) -> Callable[[Iterable[dict]], Iterator[dict]]:
    """For query output: rows -> rows with src_addr, dst_addr and address-valued `val`
    (top-N of srcip/dstip/ip) anonymised, streamed in chunks; the identity when key is None."""
    if key is None:
        return lambda rows: rows
    cp = CryptoPAn(key)
    known: dict[str, str] = {}  # pseudonyms so far: a day's distinct addresses, not its rows

    def anon(rows):
        for chunk in _chunks(rows, 20000):
            cols = [c for c in (*ADDRESS_COLUMNS, "val") if c in chunk[0]]
            known.update(cp.strings(r[c] for r in chunk for c in cols if isinstance(r[c], str) and r[c] not in known))
            for r in chunk:
                yield {k: (known.get(v, v) if k in cols and isinstance(v, str) else v) for k, v in r.items()}
    return anon


def _chunks(rows: Iterable[dict], size: int) -> Iterator[list[dict]]:
    chunk: list[dict] = []
    for r in rows:
        chunk.append(r)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def key_options(what: str):
    """`--anonymise` and `--key-file` for a command; it receives `key`: the key's bytes, or None
    without --anonymise. `what` completes the help: "Print/Write ... anonymised"."""
    def decorate(f):
        @click.option("--anonymise", "anonymise", is_flag=True,
                      help=f"{what} Crypto-PAn anonymised as nfanon does (key: --key-file or ${ENV_KEY}).")
        @click.option("--key-file", "key_file", type=click.Path(dir_okay=False), default=None,
                      help="File holding the anonymisation key (32 characters or 0x + 64 hex digits).")
        @functools.wraps(f)
        def wrapper(*args, anonymise, key_file, **kwargs):
            key = None
            if anonymise:
                try:
                    key = load_key(key_file)
                except KeyError_ as exc:
                    raise click.BadParameter(str(exc), param_hint="--key-file") from None
            return f(*args, key=key, **kwargs)
        return wrapper
    return decorate


def query_options(f):
    """`--anonymise` and `--key-file` for a command; it receives `anon`, a rows -> rows function."""
    @key_options("Print src/dst addresses")
    @functools.wraps(f)
    def wrapper(*args, key, **kwargs):
        return f(*args, anon=rows_anonymiser(key), **kwargs)
    return wrapper


@click.command("anonymise", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--key-file", type=click.Path(dir_okay=False), default=None,
              help=f"File holding the key: 32 characters or 0x + 64 hex digits (nfanon -K). Default: ${ENV_KEY}.")
@click.option("--date", "date", required=True, help="Day of flows to export, e.g. 2026-11-25.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Directory to write into.")
def anonymise(key_file, date, out):
    """Write one day's flows with src/dst addresses anonymised (Crypto-PAn, as nfanon).

    Reads lake/flows/date=D/ and writes OUT/flows/date=D/hour=H/... with the same
    Parquet schema; only src_addr and dst_addr change. The same key gives the same
    pseudonyms as `nfanon -K KEY` on the nfcapd files. IPv4 prefixes are preserved
    (two addresses sharing n leading bits still do), ports, times, volumes, exporters,
    interfaces and AS numbers are not touched. Keep the key secret: with it anyone
    can map pseudonyms back to addresses by trying candidates.

    \b
    Examples:
      head -c 24 /dev/urandom | base64 > anon.key     # 32 characters
      flowlake anonymise --key-file anon.key --date 2026-11-25 --out /srv/share
      FLOWLAKE_ANON_KEY=... flowlake anonymise --date 2026-11-25 --out /srv/share
    """
    try:
        dt.date.fromisoformat(date)
    except ValueError:
        raise click.BadParameter(f"'{date}' is not a date (YYYY-MM-DD)", param_hint="--date") from None
    try:
        key = load_key(key_file)
    except KeyError_ as exc:
        raise click.BadParameter(str(exc), param_hint="--key-file") from None
    files, rows = anonymise_day(config.get().lake, date, Path(out), CryptoPAn(key))
    click.echo(f"{rows} flows in {files} files anonymised into {Path(out) / 'flows' / f'date={date}'}")
