"""scrape"""
