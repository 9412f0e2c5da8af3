# Packages, so that tests/experiments/test_fedcompass.py and tests/test_fedcompass.py (and the
# other kit tests) import under distinct module names.
