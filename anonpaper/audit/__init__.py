"""One privacy and utility audit for any (original, released) image pair: linkage, attribute inference,
membership inference and task utility, each as a value with its standard error and as advantage retained.

:func:`audit_release` runs the suite on arrays (:mod:`anonpaper.audit.suite` describes the protocol);
:func:`audit_folders` runs it on folders written by ``anonpaper cohort generate`` and ``anonpaper anonymize`` (or
plain folders with a labels CSV, :mod:`anonpaper.audit.folders`) and writes ``report.json`` and ``report.html``
(:func:`write_report`). The chapters call it with their own arrays; it imports no chapter.
"""

from anonpaper.audit.folders import audit_folders, read_folders
from anonpaper.audit.report import write_report
from anonpaper.audit.scores import Score, advantage_retained
from anonpaper.audit.settings import AuditSettings
from anonpaper.audit.suite import AuditReport, NetworkMemo, audit_release

__all__ = ["AuditReport", "AuditSettings", "NetworkMemo", "Score", "advantage_retained", "audit_folders", "audit_release",
           "read_folders", "write_report"]
