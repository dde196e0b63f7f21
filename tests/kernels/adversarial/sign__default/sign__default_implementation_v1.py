# Segfaults inside the call, from Python.
import ctypes


def sign__default_kernel_impl(x):
    return ctypes.string_at(0)
