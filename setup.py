"""Packaging: the fixed top-level folders become subpackages of `flowlake`
(flowlake.collectors -> collectors/, ...), so nothing called `jobs` lands in site-packages."""
from setuptools import find_packages, setup

MAPPED = {"schemas": "schemas", "collectors": "collectors", "pipelines": "pipelines", "jobs": "jobs"}

packages = ["flowlake"] + [f"flowlake.{p}" for p in find_packages("flowlake")]
package_dir = {"flowlake": "flowlake"}
for name, folder in MAPPED.items():
    packages.append(f"flowlake.{name}")
    packages += [f"flowlake.{name}.{p}" for p in find_packages(folder)]
    package_dir[f"flowlake.{name}"] = folder

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"": ["*.toml", "*.csv", "*.json", "*.yaml", "*.avsc", "*.xml", "*.properties"]},
    include_package_data=True,
)
