"""krafty's compiled modules, the record walker (broker/log/_records.pyx) and the loop of Fetch
v0-3's down-conversion (broker/log/_legacy.pyx); everything else about the package is in
pyproject.toml. The extensions are optional: without a C compiler the install goes on without
them and produce validation uses the Python walker (broker/log/record_walk.py), which a node
names in its start-up log, and down-conversion its Python loop (broker/log/legacy.py)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = cythonize([Extension("broker.log._records", ["broker/log/_records.pyx"], extra_compile_args=["-O2"]),
                        # Fetch v0-3's down-conversion loop (broker/log/legacy.py)
                        Extension("broker.log._legacy", ["broker/log/_legacy.pyx"], extra_compile_args=["-O2"])],
                       compiler_directives={"language_level": 3})
for ext in extensions:
    ext.optional = True  # (cythonize does not carry it over from the Extension it is given)

setup(ext_modules=extensions)
