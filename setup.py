"""Packaging: the fixed top-level folders become subpackages of `flowlake`
(flowlake.collectors -> collectors/, ...), so nothing called `jobs` lands in site-packages."""
from setuptools import find_packages, setup

MAPPED = {"schemas": "schemas", "collectors": "collectors", "pipelines": "pipelines", "jobs": "jobs"}

# flowlake/<stage> are symlinks to the stage folders (so tools that walk one folder per
# package, e.g. import-linter's `lint-imports`, see the whole package): not packages twice
packages = ["flowlake"] + [f"flowlake.{p}" for p in find_packages("flowlake", exclude=[f"{m}*" for m in MAPPED])]
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
