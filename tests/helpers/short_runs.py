"""The short command-line runs that several test modules finish once and then read, damage or verify,
and the figure setting of tests that are not about figures."""

#: Each figure as PNG alone. A small run's report spends about half its time on the vector copy
#: (matplotlib lays every text out again for the SVG), and the tests that read what a command writes
#: do not look at it. The vector files are checked where figures are the subject: the figure and
#: report tests, every recipe's own test, the kill tests (whose commands keep the default).
FIGURE_FORMAT = "png"
PNG_ONLY = ["--figure-format", FIGURE_FORMAT]

#: A finished `staircase-add` of a few seconds: trained, analysed, reported.
SHORT_RUN = ["run", "staircase-add", "--set", "task.N=6", "--set", "model.d=8", "--set", "train.epochs=60",
             "--set", "snapshots.every=20", *PNG_ONLY]

#: A finished `lm train` of a few seconds: trained, analysed (``lm_analysis.csv``), reported, exported.
SHORT_LM = ["lm", "train", "--set", "model.d_model=16", "--set", "model.n_layers=1", "--set", "model.n_heads=2",
            "--set", "model.head_dim=8", "--set", "model.d_mlp=32", "--set", "corpus.window=16",
            "--set", "corpus.vocab_size=300", "--set", "corpus.max_tokens=20000", "--set", "train.steps=40",
            "--set", "train.batch_size=8", "--set", "snapshots.log_points=3", "--set", "snapshots.every=20",
            "--set", "analysis.k=40", "--set", "analysis.probe_steps=30", "--set", "analysis.windows=16", *PNG_ONLY]
