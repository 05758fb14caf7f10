"""krafty's one compiled module, the record walker (broker/log/_records.pyx); everything else
about the package is in pyproject.toml. The extension is optional: without a C compiler the
install goes on without it and produce validation uses the Python walker
(broker/log/record_walk.py), which a node names in its start-up log."""

from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = cythonize([Extension("broker.log._records", ["broker/log/_records.pyx"], extra_compile_args=["-O2"])],
                       compiler_directives={"language_level": 3})
for ext in extensions:
    ext.optional = True  # (cythonize does not carry it over from the Extension it is given)

setup(ext_modules=extensions)
