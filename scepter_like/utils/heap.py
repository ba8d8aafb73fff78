"""Keep freed CPU memory in the process between training steps (glibc's malloc; ENV.KEEP_CPU_HEAP).

A training step frees its activations (during backward), its gradients and its batch, and the
next step allocates the same sizes again.  With glibc's defaults that memory goes back to the
kernel in between: the top of the heap is trimmed once more than M_TRIM_THRESHOLD of it is free
(the threshold follows the largest freed block, so a few tens of MiB), and blocks above
M_MMAP_THRESHOLD are separate mmaps, unmapped when freed.  The next step then page-faults the
memory back one zeroed 4 KiB page at a time (~3 us each): 6,000-10,000 faults per MeshGraphNet
step at HIDDEN 64 x 6 blocks, a tenth of its time (docs/cpu_memory.md).

``keep_heap`` disables the trimming and fixes the mmap threshold at glibc's ceiling (32 MiB on
64-bit), so freed blocks up to that size stay in the heap for the next step.  The cost: the
process's resident memory stays at its high-water mark (the peak of a step, or of an evaluation)
instead of falling back in between; memory blocks above 32 MiB are still mmapped and returned.
Other C libraries (musl, macOS) and a preloaded jemalloc / tcmalloc keep their own behaviour.
"""

import ctypes
import os

M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
NEVER_TRIM = -1  # "-1 disables trimming completely" (mallopt(3))
MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc refuses more on 64-bit (HEAP_MAX_SIZE / 2)


def glibc_version():
    """'2.36' where the process runs on glibc, else ''."""
    try:
        text = os.confstr('CS_GNU_LIBC_VERSION') or ''
    except (ValueError, OSError):  # no such name on this platform
        return ''
    name, _, version = text.partition(' ')
    return version if name == 'glibc' else ''


def keep_heap():
    """Stop glibc returning freed memory to the kernel between steps; whether it was set (False off glibc).

    Process-wide and for the rest of the process (glibc has no way back to its adaptive
    thresholds); forked DataLoader workers inherit it.
    """
    if not glibc_version():
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, NEVER_TRIM))
