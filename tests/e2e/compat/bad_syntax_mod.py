x = 1
y = (x +
     2
z = 3
