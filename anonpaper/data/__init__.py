"""Data: the Cohort interface, phantom cohorts, real-dataset loaders, preprocessing and patient-level splits."""

from anonpaper.data.arrays import CohortArrays, load_arrays, split_summary
from anonpaper.data.cohort import Cohort, dr_grade_to_3class, validate_table
from anonpaper.data.registry import available_datasets, load_cohort, register_dataset
from anonpaper.data.splits import assert_no_patient_leakage, patient_split

__all__ = ["Cohort", "CohortArrays", "available_datasets", "assert_no_patient_leakage", "dr_grade_to_3class",
           "load_arrays", "load_cohort", "split_summary",
           "patient_split", "register_dataset", "validate_table"]
