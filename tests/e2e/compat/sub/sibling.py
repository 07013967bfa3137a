WHERE = "beside sub/where.py"
