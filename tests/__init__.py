# A package, so that `tests` is this folder even where an installed distribution ships a top-level `tests` package of
# its own (pyserini 0.17.0, which WebShop's paper search uses, does).
