"""omne: knowledge graphs -> multi-hop QA -> tool-using LLM agents. Plain library, no Dagster here."""

__version__ = "0.1.0"
