"""The Celery edge of the worker fleet: the application (workers.app) and its one thin
task (workers.tasks). All logic lives in evotrainer.fleet; nothing in the core imports this."""
