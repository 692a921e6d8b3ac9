"""ICU's root collator, called in the system's ICU library through ctypes: no compiler, no headers.

The canonical order breaks timestamp ties by `String.prototype.localeCompare` as Node runs it: ICU's
root collation at tertiary strength with normalization on (`digest.turns`). This module opens that
collator with ICU's C API (`ucol_open("")`, `ucol_setAttribute(NORMALIZATION_MODE, ON)`,
`ucol_getSortKey`) in the shared library every Debian machine of this project carries (`libicu72`
on Debian 12, `libicu76` on 13): the same library and the same calls PyICU made when it was compiled
against it, so the same sort keys, byte for byte (tests/test_collation.py holds them equal on the
golden fixtures and a corpus of ties; BENCHMARKS.md, "ICU without a compiler").

ICU's C symbols carry the library's major version (`ucol_open_72`): it is read off the file name.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import threading

# ICU's enums (unicode/ucol.h), stable across versions.
_UCOL_NORMALIZATION_MODE = 4
_UCOL_ON = 17
_U_ZERO_ERROR = 0

# Where Debian and most Linux distributions put ICU.
_SEARCH = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")


class CollationUnavailable(RuntimeError):
    pass


def _find_library(folders: tuple[str, ...]) -> tuple[str, int]:
    found = []
    for path in (path for folder in folders for path in glob.glob(f"{folder}/libicui18n.so.*")):
        match = re.search(r"libicui18n\.so\.(\d+)", os.path.basename(path))
        if match:
            found.append((int(match.group(1)), path))
    if not found:
        raise CollationUnavailable(
            f"ICU's collation library (libicui18n.so.N) is not in {', '.join(folders)}: install your "
            "system's ICU runtime (Debian: libicu72 on 12, libicu76 on 13)"
        )
    version, path = max(found)  # the newest, where a machine has two
    return path, version


class RootCollator:
    """`localeCompare`'s collator: ICU root, tertiary strength (ICU's default), normalization on."""

    def __init__(self, folders: tuple[str, ...] = _SEARCH) -> None:
        path, version = _find_library(folders)
        self.library, self.version = path, version
        lib = ctypes.CDLL(path)
        self._open = getattr(lib, f"ucol_open_{version}")
        self._open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
        self._open.restype = ctypes.c_void_p
        set_attribute = getattr(lib, f"ucol_setAttribute_{version}")
        set_attribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        set_attribute.restype = None
        self._sort_key = getattr(lib, f"ucol_getSortKey_{version}")
        self._sort_key.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32]
        self._sort_key.restype = ctypes.c_int32
        status = ctypes.c_int(_U_ZERO_ERROR)
        self._collator = self._open(b"", ctypes.byref(status))  # "": the root locale
        if status.value > _U_ZERO_ERROR or not self._collator:
            raise CollationUnavailable(f"ucol_open failed in {path}: ICU error {status.value}")
        set_attribute(self._collator, _UCOL_NORMALIZATION_MODE, _UCOL_ON, ctypes.byref(status))
        if status.value > _U_ZERO_ERROR:
            raise CollationUnavailable(f"ucol_setAttribute failed in {path}: ICU error {status.value}")
        self._local = threading.local()  # a key buffer per thread: ICU's collator itself is thread-safe

    def sort_key(self, text: str) -> bytes:
        """ICU's sort key for `text` (its terminating zero included, as PyICU returned it). A lone
        surrogate goes to ICU as the code unit it is, as PyICU passed it."""
        units = text.encode("utf-16-le", "surrogatepass")
        buffer = getattr(self._local, "buffer", None)
        if buffer is None:
            buffer = self._local.buffer = ctypes.create_string_buffer(1024)
        needed = self._sort_key(self._collator, units, len(units) // 2, buffer, len(buffer))
        if needed > len(buffer):  # a long id: a buffer of its own size, this once
            buffer = ctypes.create_string_buffer(needed)
            needed = self._sort_key(self._collator, units, len(units) // 2, buffer, needed)
        return ctypes.string_at(buffer, needed)
