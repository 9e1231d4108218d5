"""Kubernetes quantities (``100Gi``, ``500m``): parsed, checked, and the fix for a slip."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from .base import FieldProblem

# The largest quantity Kubernetes holds in a resource (an int64 of base units).
QUANTITY_MAX = 2**63 - 1


def _positive_quantity(v: str | None) -> str | None:
    if v is not None:
        try:
            value = parse_quantity(v)
        except ValueError:
            raise FieldProblem(f"{v!r} is not a Kubernetes quantity",
                               quantity_fix(v)) from None
        if value <= 0:
            raise FieldProblem(f"{v!r} is not more than 0", "give a positive size, e.g. 64Gi")
        if value > QUANTITY_MAX:
            raise FieldProblem(f"{v!r} is more than Kubernetes can hold (2^63 - 1)",
                               "give a realistic size, e.g. 64Gi")
    return v


# Kubernetes quantity suffixes (apimachinery resource.Quantity).
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"),
            "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18")}
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
                       r"((?:[KMGTPE]i)|[numkMGTPE]|(?:[eE][+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)))?$")


_UNIT_SLIPS = {"kb": "k", "mb": "M", "gb": "G", "tb": "T", "pb": "P", "kib": "Ki",
               "mib": "Mi", "gib": "Gi", "tib": "Ti", "pib": "Pi", "ki": "Ki", "mi": "Mi",
               "gi": "Gi", "ti": "Ti", "pi": "Pi", "g": "G", "t": "T", "cores": "",
               "core": "", "cpu": "", "cpus": "", "b": "", "bytes": ""}


def quantity_fix(text: str) -> str:
    """How to write ``text`` as a Kubernetes quantity: the likely intended spelling when
    the unit is a common slip (``64GB``, ``64gi``, ``8 cores``), and the units."""
    units = ("Kubernetes units: Ki, Mi, Gi, Ti (powers of 2) or k, M, G, T (powers of 10), "
             "m for thousandths; a bare number for cores or bytes")
    match = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$", str(text))
    if match and match.group(2).lower() in _UNIT_SLIPS:
        unit = _UNIT_SLIPS[match.group(2).lower()]
        better = match.group(1) + unit
        alt = {"G": "Gi", "M": "Mi", "T": "Ti", "k": "Ki"}.get(unit)
        return (f"write {better!r}" + (f" (or {match.group(1) + alt!r} in powers of 2)"
                                       if alt else "") + f"; {units}")
    return f"give e.g. 64Gi or 8; {units}"


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes quantity (``100Gi``, ``1.5T``, ``500m``, ``1e9``) as a number of base
    units (bytes, cores). The grammar is the CRD's pattern; raises ``ValueError``."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. 100Gi, 500G, 8, 500m)")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number)
        if suffix in _BINARY:
            return value * _BINARY[suffix]
        if suffix in _DECIMAL:
            return value * _DECIMAL[suffix]
        return value * (Decimal(10) ** Decimal(suffix[1:]))  # an exponent: 1e9
    except InvalidOperation as exc:
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from exc
