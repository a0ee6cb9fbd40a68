"""How names and relation phrases read in English: shared by the KG renderings, the tools, the questions and the
conversations (below all of them in the package layers)."""
