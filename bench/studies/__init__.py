"""Every study of the one harness, by name: `python -m bench.run STUDY [SECTION]`, its page `... STUDY --page`."""

from bench.studies import evidence

STUDIES = {study.name: study for study in (evidence.STUDY,)}
