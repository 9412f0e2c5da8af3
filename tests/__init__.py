# Test folders mirror the package (tests/<layer>/ for fedsim_jax/<layer>/) and are packages, so
# that files of the same name in different folders import under distinct module names.
