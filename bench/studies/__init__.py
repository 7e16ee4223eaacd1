"""Every study of the one harness, by name: `python -m bench.run STUDY [SECTION]`, its page `... STUDY --page`."""

from bench.studies import e5, evidence, real_start

STUDIES = {study.name: study for study in (evidence.STUDY, real_start.STUDY, e5.STUDY)}
