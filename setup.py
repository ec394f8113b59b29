"""The optional compiled build of the merge's fold (``epto/epidemic/_cfold.pyx``,
docs/benchmarks.md): built when Cython and a C compiler are at hand, skipped
otherwise (``optional=True``); the package then runs the same fold in Python
(``epto.epidemic._fold``). Everything else is in pyproject.toml."""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # no Cython: the Python build of the fold only
    extensions = []
else:
    extensions = cythonize(
        [Extension("epto.epidemic._cfold", ["epto/epidemic/_cfold.pyx"], optional=True)],
        compiler_directives={"language_level": 3},
        quiet=True,
    )

setup(ext_modules=extensions)
