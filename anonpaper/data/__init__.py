"""Data: the Cohort interface, phantom cohorts, real-dataset loaders, preprocessing and patient-level splits."""

from anonpaper.data.cohort import Cohort, dr_grade_to_3class, validate_table
from anonpaper.data.registry import available_datasets, load_cohort, register_dataset
from anonpaper.data.splits import assert_no_patient_leakage, patient_split

__all__ = ["Cohort", "available_datasets", "assert_no_patient_leakage", "dr_grade_to_3class", "load_cohort",
           "patient_split", "register_dataset", "validate_table"]
