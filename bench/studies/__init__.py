"""Every study of the one harness, by name: `python -m bench.run STUDY [SECTION]`, `python -m bench.page STUDY`."""

from bench.studies import e5, evidence, legacy, real_start

STUDIES = {study.name: study for study in (evidence.STUDY, real_start.STUDY, e5.STUDY, *legacy.STUDIES)}
