"""The whole workbook: run every notebook in order (`run`, `make workbook`) and build the writeup
(`writeup`, `make writeup`).
"""
