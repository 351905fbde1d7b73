"""Package discovery: ``companion`` as is, and the ``kernels/`` folder under the import name
``companion_kernels`` (the name ``kernels`` belongs to a Hugging Face package that transformers probes)."""

from setuptools import find_packages, setup

packages = find_packages(include=["companion", "companion.*"])
packages += ["companion_kernels"] + [f"companion_kernels.{p}" for p in find_packages("kernels")]

setup(packages=packages, package_dir={"companion_kernels": "kernels"})
