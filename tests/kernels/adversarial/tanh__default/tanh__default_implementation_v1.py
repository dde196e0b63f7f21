# Raises.
def tanh__default_kernel_impl(x):
    raise ValueError("this kernel raises")
