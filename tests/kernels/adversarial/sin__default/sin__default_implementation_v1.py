# An endless host loop.
def sin__default_kernel_impl(x):
    while True:
        pass
