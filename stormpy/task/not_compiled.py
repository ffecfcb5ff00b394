"""What ``cython.compiled`` says where Cython is not installed: the module runs interpreted."""
compiled = False
