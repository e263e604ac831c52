"""Import a bundle ZIP into Superset, overwriting by UUID (runs in .venv-superset).

Usage: python import_bundle.py BUNDLE.zip ADMIN_USER [RETIRED_CHART_UUID,...]
Uses Superset's asset importer (the one behind /api/v1/assets/import/), which
overwrites databases, datasets, charts and dashboards that carry the same UUIDs:
re-importing the same bundle is idempotent. Charts the dashboards' YAML lists as
retired (merged into others or dropped) are deleted, so an upgraded installation
keeps no orphans.
"""
import sys
import uuid
import zipfile


def main(path: str, username: str, retired: list[str]) -> None:
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
        gone = 0
        if retired:
            from superset import db
            from superset.models.slice import Slice

            for chart in db.session.query(Slice).filter(Slice.uuid.in_([uuid.UUID(u) for u in retired])).all():
                db.session.delete(chart)
                gone += 1
            db.session.commit()
        print(f"imported {sum(1 for n in contents if n.startswith('charts/'))} charts, "
              f"{sum(1 for n in contents if n.startswith('dashboards/'))} dashboards; {gone} retired charts deleted")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [u for u in (sys.argv[3] if len(sys.argv) > 3 else "").split(",") if u])
