"""timerl.ir"""
