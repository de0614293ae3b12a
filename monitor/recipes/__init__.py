"""recipes"""
