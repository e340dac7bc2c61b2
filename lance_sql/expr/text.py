"""Values spelled as text exactly as DataFusion spells them in ``concat`` and ``||``.

pyarrow's casts to string differ from DataFusion's (arrow-rs) for floats (``1`` for
``1.0``, ``1e+16`` for ``1e16``), timestamps (a space for ``T``, every fractional digit
of the unit, UTC for a zone's local time) and date64 (a date for a datetime), so an
UPDATE ``SET s = concat(x, '')`` would store other text than the same ``SELECT`` shows.
:func:`text_function` names the pyarrow scalar function, registered here, spelling such
values (vectorised with numpy and pyarrow kernels, per batch):

* floats as arrow-rs (ryu): the shortest digits that read back; ``12.5``, ``1.0``,
  ``0.00001``, ``1e-7``, ``1e16``, ``1.5e300``, ``NaN``, ``inf``; decimal notation while
  the value is below 10^16 (float32: 10^13) and at least 10^-5 (float32: 10^-6);
* timestamps as ``2024-01-02T03:04:05`` with the fraction cut to 3, 6 or 9 digits (none
  when zero), ``Z`` after a UTC time, the zone's local time and ``+hh:mm`` offset for
  another zone; date64 as a timestamp of its milliseconds.

* decimals with every digit of their scale, never an exponent (pyarrow: ``1E-10``).

Other types cast as pyarrow casts them (integers, booleans, date32 agree).
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lance_sql.errors import InvalidInputError

# The digits of a shortest float spelling, as pyarrow writes it ("-1.25e+20", "0.001")
_FLOAT_PARTS = r"^(?P<sign>-?)(?P<whole>\d+)(?:\.(?P<frac>\d+))?(?:e(?P<exp>[+-]?\d+))?$"
# arrow-rs (ryu) writes a value 0.DIGITS x 10^kk in decimal notation while
# low < kk <= high, scientific otherwise: float64 1e-5 -> 0.00001, 1e-6 -> 1e-6
_DECIMAL_KK = {pa.float64(): (-5, 16), pa.float32(): (-6, 13)}
_FRACTION_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}

_registered: set[str] = set()
_register_lock = threading.Lock()


def needs_own_text(t: pa.DataType) -> bool:
    """Whether pyarrow's cast to string spells ``t`` unlike DataFusion."""
    return (pa.types.is_floating(t) or pa.types.is_timestamp(t)
            or pa.types.is_date64(t) or pa.types.is_decimal(t))


def text_function(t: pa.DataType) -> str:
    """The name of the pyarrow scalar function spelling ``t`` (a float32 / float64,
    decimal or timestamp type; date64 is spelled as ``timestamp[ms]``) as DataFusion's
    text, registered on first use."""
    if not (pa.types.is_float32(t) or pa.types.is_float64(t) or pa.types.is_timestamp(t)
            or pa.types.is_decimal(t)):
        raise InvalidInputError(f"no DataFusion spelling of {t} as text here")
    return _register(t)


def decimal_text(values: pa.Array) -> pa.Array:
    """Decimals as arrow-rs spells them: every digit of the scale, never an exponent
    (``0.0000000001``, ``-12.5000000000``; pyarrow writes ``1E-10``)."""
    t = values.type
    whole_type = (pa.decimal128 if t.byte_width == 16 else pa.decimal256)(t.precision, 0)
    digits = values.view(whole_type).cast(pa.string())  # the unscaled integer
    if t.scale <= 0:
        return digits
    negative = pc.starts_with(digits, "-")
    padded = pc.utf8_lpad(pc.replace_substring(digits, "-", ""), width=t.scale + 1,
                          padding="0")
    whole = pc.utf8_slice_codeunits(padded, 0, -t.scale)
    fraction = pc.utf8_slice_codeunits(padded, -t.scale)
    sign = pc.if_else(negative, "-", "")
    return pc.binary_join_element_wise(sign, whole, ".", fraction, "")


def literal_text(value: pa.Scalar) -> str:
    """One literal value as DataFusion's text."""
    one = pa.array([value.as_py()], value.type)
    if pa.types.is_date64(one.type):
        one = one.cast(pa.timestamp("ms"))
    if pa.types.is_floating(one.type):
        return str(float_text(one)[0].as_py())
    if pa.types.is_timestamp(one.type):
        return str(timestamp_text(one)[0].as_py())
    if pa.types.is_decimal(one.type):
        return str(decimal_text(one)[0].as_py())
    return str(one.cast(pa.string())[0].as_py())


def float_text(values: pa.Array) -> pa.Array:
    """Floats (float32 or float64) as arrow-rs spells them (see the module)."""
    low, high = _DECIMAL_KK[values.type]
    numbers = np.asarray(values.fill_null(0).to_numpy(zero_copy_only=False))
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), bool)
    finite = valid & np.isfinite(numbers)
    pieces: list[tuple[np.ndarray, pa.Array]] = []   # (positions, their text)
    for word, where in (("NaN", np.isnan(numbers)), ("inf", numbers == np.inf),
                        ("-inf", numbers == -np.inf)):
        idx = np.flatnonzero(valid & where)
        pieces.append((idx, pa.array([word] * len(idx), pa.string())))
    idx = np.flatnonzero(~valid)
    pieces.append((idx, pa.nulls(len(idx), pa.string())))
    at = np.flatnonzero(finite)
    plain = pc.cast(values.take(pa.array(at)), pa.string())   # shortest digits that read back
    parts = pc.extract_regex(plain, _FLOAT_PARTS)
    sign, whole, frac = parts.field("sign"), parts.field("whole"), parts.field("frac")
    exponent = pc.cast(pc.replace_substring(
        pc.if_else(pc.equal(parts.field("exp"), ""), "0", parts.field("exp")), "+", ""),
        pa.int64())
    raw = pc.binary_join_element_wise(whole, frac, "")
    unpadded = pc.utf8_ltrim(raw, "0")
    digits = pc.utf8_rtrim(unpadded, "0")
    # the value is 0.DIGITS x 10^kk
    kk = np.asarray(pc.subtract(pc.add(pc.utf8_length(whole).cast(pa.int64()), exponent),
                                pc.subtract(pc.utf8_length(raw), pc.utf8_length(unpadded))
                                .cast(pa.int64())).to_numpy(zero_copy_only=False))
    zero = np.asarray(pc.equal(digits, "").to_numpy(zero_copy_only=False), bool)
    scientific = ~zero & ((kk > high) | (kk <= low))
    decimal = ~zero & ~scientific

    def spelled(rows: np.ndarray, body: pa.Array) -> None:
        pieces.append((at[rows], pc.binary_join_element_wise(sign.take(pa.array(rows)), body,
                                                               "")))

    rows = np.flatnonzero(zero)
    spelled(rows, pa.array(["0.0"] * len(rows), pa.string()))
    rows = np.flatnonzero(scientific)
    if len(rows):  # 1e16, 1.25e-7
        d = digits.take(pa.array(rows))
        tail = pc.utf8_slice_codeunits(d, 1)
        dot = pc.if_else(pc.equal(tail, ""), "", pc.binary_join_element_wise(".", tail, ""))
        power = pa.array(kk[rows] - 1).cast(pa.string())
        spelled(rows, pc.binary_join_element_wise(pc.utf8_slice_codeunits(d, 0, 1), dot, "e",
                                                  power, ""))
    for point in np.unique(kk[decimal]):  # at most 20 places of the decimal point
        rows = np.flatnonzero(decimal & (kk == point))
        d = digits.take(pa.array(rows))
        if point > 0:  # 12.5, 1200.0
            padded = pc.utf8_rpad(d, int(point), "0")
            fracs = pc.utf8_slice_codeunits(padded, int(point))
            fracs = pc.if_else(pc.equal(fracs, ""), "0", fracs)
            body = pc.binary_join_element_wise(pc.utf8_slice_codeunits(padded, 0, int(point)),
                                               fracs, ".")
        else:  # 0.00125
            body = pc.binary_join_element_wise("0." + "0" * int(-point), d, "")
        spelled(rows, body)
    positions = np.concatenate([p for p, _ in pieces])
    texts = pa.concat_arrays([t.cast(pa.string()) for _, t in pieces])
    order = np.empty(len(positions), np.int64)
    order[positions] = np.arange(len(positions))
    return texts.take(pa.array(order))


def timestamp_text(values: pa.Array) -> pa.Array:
    """Timestamps as arrow-rs spells them (see the module)."""
    t = values.type
    tz = t.tz
    per_second = _FRACTION_PER_SECOND[t.unit]
    ticks = np.asarray(values.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False))
    sub = np.mod(ticks, per_second)
    local = pc.local_timestamp(values) if tz is not None else values
    # "YYYY-MM-DD HH:MM:SS[.fraction]", every digit of the unit (strftime is 5x slower)
    text = pc.replace_substring(local.cast(pa.timestamp(t.unit)).cast(pa.string()), " ", "T",
                                max_replacements=1)
    # keep 0, 3, 6 or 9 fraction digits, the fewest that say it all, as arrow-rs does
    width = len(str(per_second)) - 1
    digits = np.full(len(values), width)
    for keep in (6, 3, 0):
        if keep < width:
            digits = np.where(sub % (per_second // 10**keep) == 0, keep, digits)
    for keep in np.unique(digits):
        if keep < width:  # the unit's digits past ``keep`` go (with the point for none)
            cut = pc.utf8_slice_codeunits(text, 0, -(width - keep + (keep == 0)))
            text = pc.if_else(pa.array(digits == keep), cut, text)
    if tz is None:
        return text
    if tz in ("UTC", "Z", "+00:00", "Etc/UTC"):
        return pc.binary_join_element_wise(text, "Z", "")
    offset = pc.replace_substring_regex(pc.strftime(values, format="%z"),
                                        r"^([+-]\d\d)(\d\d)$", r"\1:\2")
    return pc.binary_join_element_wise(text, offset, "")


def _register(t: pa.DataType) -> str:
    """The name of the scalar function spelling ``t``, registered on first use."""
    name = f"lance_sql_text_{str(t).encode().hex()}"
    with _register_lock:
        if name in _registered:
            return name
        spell = float_text if pa.types.is_floating(t) else \
            decimal_text if pa.types.is_decimal(t) else timestamp_text

        def kernel(ctx: pc.UdfContext, values: pa.Array | pa.Scalar) -> pa.Array | pa.Scalar:
            if isinstance(values, pa.Scalar):  # a literal: one value, given back as one
                return spell(pa.array([values.as_py()], values.type))[0]
            return spell(values)

        pc.register_scalar_function(kernel, name,
                                    {"summary": f"{t} as DataFusion's text",
                                     "description": "see lance_sql.expr.text"},
                                    {"values": t}, pa.string())
        _registered.add(name)
    return name
