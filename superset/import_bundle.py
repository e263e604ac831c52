"""Import a bundle ZIP into Superset, overwriting by UUID (runs in .venv-superset).

Usage: python import_bundle.py BUNDLE.zip ADMIN_USER
Uses Superset's asset importer (the one behind /api/v1/assets/import/), which
overwrites databases, datasets, charts and dashboards that carry the same UUIDs:
re-importing the same bundle is idempotent.
"""
import sys
import zipfile


def main(path: str, username: str) -> None:
    from superset.app import create_app

    app = create_app()
    with app.app_context():
        from flask import g
        from superset import security_manager
        from superset.commands.importers.v1.assets import ImportAssetsCommand
        from superset.commands.exceptions import CommandInvalidError

        user = security_manager.find_user(username=username)
        if user is None:
            sys.exit(f"import: Superset user {username!r} does not exist (run `flowlake superset start` first)")
        g.user = user
        with zipfile.ZipFile(path) as zf:
            contents = {name.split("/", 1)[1]: zf.read(name).decode() for name in zf.namelist() if "/" in name}
        try:
            ImportAssetsCommand(contents).run()
        except CommandInvalidError as exc:
            sys.exit(f"import: {path}: {exc.normalized_messages()}")
        print(f"imported {sum(1 for n in contents if n.startswith('charts/'))} charts, "
              f"{sum(1 for n in contents if n.startswith('dashboards/'))} dashboards")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
