# A package: see tests/__init__.py.
