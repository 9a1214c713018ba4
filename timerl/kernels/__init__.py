"""timerl.kernels"""
