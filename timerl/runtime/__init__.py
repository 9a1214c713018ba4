"""timerl.runtime"""
