"""Differential fuzzing: ``gen`` draws random well-formed programs (as printable source),
``check`` runs them on every backend and pass switch against the reference executor,
``__main__`` is the long run (``python -m tests.fuzz --examples 2000``) and replay."""
