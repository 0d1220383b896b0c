"""The reference application's entry point: ``workers.app:rail``, the ``JobRail`` that
``jobrail run|api|worker|scheduler|migrate --app workers.app:rail`` (or
``JOBRAIL_APP=workers.app:rail``) serves, runs and migrates."""
