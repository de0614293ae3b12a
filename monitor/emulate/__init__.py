"""emulate"""
