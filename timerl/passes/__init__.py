"""timerl.passes"""
