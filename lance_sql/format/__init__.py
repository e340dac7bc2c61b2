"""Pure codecs: bytes <-> value objects. No I/O happens in this package."""
