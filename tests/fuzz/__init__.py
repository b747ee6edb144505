"""Coverage-guided fuzzing (atheris, libFuzzer) of every parser a client reaches, before and after a login.

``targets`` holds the targets, each a function of one input that raises nothing but what the proxy turns into a
closed connection (``ProtocolError``) or a refused login (``AuthenticationFailed``); ``run`` runs one under
atheris (``python -m tests.fuzz.run TARGET [libFuzzer flags] [corpus dirs]``); ``corpus/<target>/`` is the seed
corpus, written by ``python -m tests.fuzz.seeds``. ``make fuzz`` runs each for ten minutes (``bench/fuzz.py``);
the test suite runs each for seconds and every seed once.
"""
