"""Issue 19's one bench harness: claims as data (claims.py), one runner (run.py), one writer (write.py)."""
