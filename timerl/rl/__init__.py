"""timerl.rl"""
