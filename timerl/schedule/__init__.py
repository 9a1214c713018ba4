"""timerl.schedule"""
