"""Loaders for users' copies of the papers' real datasets (nothing is ever downloaded or written to DATA_ROOT).

fundus.py (BRSET, ODIR-5K, EyePACS, EyeQ, APTOS 2019, IDRiD, DRIVE, CHASE_DB1), cxr.py (MIMIC-CXR-JPG, CheXpert),
iris.py (Warsaw-BioBase-Disease-Iris v2.1), faces.py (CelebAMask-HQ); base.py holds the lazy ``RealCohort`` and the
strict file readers; check.py implements ``anonpaper data check``. Layouts and protocols: data_manifests/*.yaml.
"""
